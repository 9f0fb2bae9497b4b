"""``python -m edgeforge.runner COMMAND ...`` (and the zipapp's entry point): the runner's main."""
import sys

from .main import main

sys.exit(main())
