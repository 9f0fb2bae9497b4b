"""docs/architecture.md's "Where each document's model lives": every module:class it names
exists and is a pydantic model, and the table names the documents issue 48 asks for."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from pydantic import BaseModel

DOC = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()


def _named() -> list[str]:
    section = DOC[DOC.index("## Where each document's model lives"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"`(edgeforge(?:\.\w+)+:\w+)`", section)


def test_every_named_model_exists():
    named = _named()
    assert len(named) >= 8, named
    missing = []
    for ref in named:
        module, cls = ref.split(":")
        obj = getattr(importlib.import_module(module), cls, None)
        if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
            missing.append(ref)
    assert missing == [], f"docs/architecture.md names models that do not exist: {missing}"


def test_the_documents_of_issue_48_are_named():
    classes = {ref.split(":")[1] for ref in _named()}
    assert {"BuildMeta", "Manifest", "BenchResult", "LoadResult", "Profile", "ReportSummary"} <= classes
