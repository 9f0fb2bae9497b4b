"""Build passes. Importing this package registers them."""
from . import export, lite, onnx, quantize, verify  # noqa: F401
from .base import REGISTRY, Artifact, Pass, PassContext  # noqa: F401

try:  # the legalize pass lives in its own module
    from . import legalize_pass  # noqa: F401
except ImportError:  # pragma: no cover
    pass
