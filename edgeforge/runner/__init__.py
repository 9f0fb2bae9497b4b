"""The on-device runner. ``edgeforge_runner.py`` and ``device_facts.py`` (the fingerprint and
the probe, which the runner imports) are shipped to devices side by side; they import nothing
from edgeforge (only the standard library, numpy and the model runtime)."""
from pathlib import Path

RUNNER_FILE = Path(__file__).with_name("edgeforge_runner.py")
FACTS_FILE = Path(__file__).with_name("device_facts.py")
