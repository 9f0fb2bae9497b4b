"""The on-device runner. ``edgeforge_runner.py`` is shipped to devices as one file; it imports
nothing from edgeforge (only the standard library, numpy and the model runtime)."""
from pathlib import Path

RUNNER_FILE = Path(__file__).with_name("edgeforge_runner.py")
