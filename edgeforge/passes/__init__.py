"""Build passes. Importing this package registers them."""
from . import export, legalize, lite, onnx, quantize, verify  # noqa: F401
from .base import REGISTRY, Artifact, Pass, PassContext  # noqa: F401
