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


def temps(c: dict) -> str:
    t0, t1 = c.get("temp_c_before"), c.get("temp_c_after")
    if not _num(t0) and not _num(t1):
        return "-"
    return f"{'-' if not _num(t0) else f'{t0:.1f}'} -> {'-' if not _num(t1) else f'{t1:.1f}'}"


def load(c: dict) -> str:
    la = c.get("load_avg")
    return "-" if not la else "/".join(f"{x:.2f}" for x in la if _num(x))


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
