"""edgeforge: an edge and mobile deployment compiler for PaddlePaddle models."""
import os as _os
import warnings as _warnings

_os.environ["FLAGS_enable_pir_api"] = "0"   # legacy programs, before anything imports paddle

_warnings.filterwarnings("ignore", message="No ccache found")   # paddle's import-time noise

__version__ = "0.1.0"
