"""The one set of number formatters, shared by the Markdown, HTML and terminal renderers.

Each takes a value that may be None (or NaN) and returns "-" for it."""
from __future__ import annotations

import math


def ms(v) -> str:
    return "-" if not _num(v) else f"{v:.3f}"


def pct(v) -> str:
    """A fraction 0..1 as a percentage."""
    return "-" if not _num(v) else f"{v * 100:.2f}%"


def points(v) -> str:
    return "-" if not _num(v) else f"{v:.2f}"


def ratio(v) -> str:
    return "-" if not _num(v) else f"{v:.2f}x"


def num(v, spec: str = ".3f", suffix: str = "") -> str:
    """Any number with a format spec and a unit: ``num(3.14159, ".2f", " ms")``."""
    return "-" if not _num(v) else f"{format(v, spec)}{suffix}"


def nbytes(n) -> str:
    """A byte count as B, KB, MB or GB (1024-based, one decimal above bytes)."""
    if not _num(n):
        return "-"
    for unit in ("B", "KB", "MB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def size(n) -> str:
    if not _num(n):
        return "-"
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.2f} MB"


def temps(t0, t1) -> str:
    """The device's temperature before -> after a run (C)."""
    if not _num(t0) and not _num(t1):
        return "-"
    return f"{'-' if not _num(t0) else f'{t0:.1f}'} -> {'-' if not _num(t1) else f'{t1:.1f}'}"


def load(la) -> str:
    """The device's load averages before a run."""
    return "-" if not la else "/".join(f"{x:.2f}" for x in la if _num(x))


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# Markdown: what edgeforge did not write (device, model and file names, messages from a device)
# is escaped, so that no renderer reads it as HTML, a link, emphasis or a table's column break.
_MD_SPECIAL = "\\`*_[]<>|~&!"


def md_text(text: str) -> str:
    """``text`` as literal Markdown (CommonMark): ASCII punctuation that could start markup is
    backslash-escaped, line breaks become spaces."""
    out = "".join("\\" + c if c in _MD_SPECIAL else c for c in str(text))
    return " ".join(out.splitlines()) if "\n" in out or "\r" in out else out


def md_code(text: str) -> str:
    """``text`` as a Markdown code span (literal there: no HTML, no emphasis): fenced by one
    backtick more than its longest run of them; a ``|`` is escaped for tables (GFM splits a
    table's cells before it reads the spans)."""
    text = " ".join(str(text).splitlines()).replace("|", "\\|")
    if not text:
        return "-"
    ticks = 1
    while "`" * ticks in text:
        ticks += 1
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{'`' * ticks}{pad}{text}{pad}{'`' * ticks}"
