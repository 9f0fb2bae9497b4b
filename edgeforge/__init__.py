"""edgeforge: an edge and mobile deployment compiler for PaddlePaddle models."""
import os as _os

_os.environ["FLAGS_enable_pir_api"] = "0"   # legacy programs, before anything imports paddle

__version__ = "0.1.0"
