"""The edgeforge command line (``edgeforge.cli:main``): see :mod:`.main`."""
from .main import main

__all__ = ["main"]
