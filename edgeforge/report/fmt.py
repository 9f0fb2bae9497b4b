"""Number formatting shared by the Markdown, HTML and terminal renderers."""
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
