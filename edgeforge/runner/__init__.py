"""The on-device runner, a package that imports nothing from edgeforge (only the standard
library, numpy and the model runtime, imported lazily). Devices get it as one zipapp
(edgeforge.device.link.runner_app); the host imports its pure modules (predictors, metrics,
postprocess, pipeline, limits) directly. ``device_facts.py`` (the fingerprint and the probe) is
also sent alone by ``edgeforge devices check``. ``remote/`` holds the helper scripts the host
sends inline; they are not part of the zipapp."""
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
FACTS_FILE = PACKAGE_DIR / "device_facts.py"
