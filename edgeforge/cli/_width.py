"""Fitting what people read into the terminal's width (80 columns and up).

- :func:`path_cells`: a table column of result paths shows the full path where it fits, else
  the file name, else a short id (the file name's timestamp and digest), and says once below
  the table where the files are.
- :func:`clause_wrap`: a long one-line message wrapped at its clause boundaries (``"; "`` and
  ``": "``), never inside a clause, so a phrase people (and tests) look for stays on one line.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

BORDER = 3          # a rich table column's padding and rule


def table_width(columns: Sequence[Sequence[str]]) -> int:
    """The width a rich table needs for ``columns`` (each: the header, then the cells)."""
    return 1 + sum(max(len(c) for c in col) + BORDER for col in columns)


def short_id(path: Path) -> str:
    """``161530Z…a1b2c3d4`` for a result file ``20261201T161530Z-…-a1b2c3d4.json`` (the time of
    its timestamp and its artifact digest: ``ls results/*161530Z*a1b2c3d4*`` finds it); the
    stem for anything else."""
    parts = Path(path).stem.split("-")
    stamp = parts[0] if parts and re.fullmatch(r"\d{8}T\d{6}Z", parts[0]) else None
    if stamp is None:
        return Path(path).stem
    tail = [p for p in parts[1:] if p != "incomplete"]
    digest = tail[-1] if tail and re.fullmatch(r"[0-9a-f]{8}", tail[-1]) else ""
    mark = "-incomplete" if parts[-1] == "incomplete" else ""
    return f"{stamp[9:]}…{digest}{mark}" if digest else f"{stamp}{mark}"


def path_cells(paths: Sequence[Path | None], used: int, width: int) -> tuple[list[str | None], str | None]:
    """Cells for ``paths`` (None stays None) in a column of a table whose other columns take
    ``used`` characters, on a ``width``-column terminal: full paths if the longest fits, else
    file names, else short ids. Returns the cells and a footer naming the directory (None when
    the full paths are shown)."""
    real = [Path(p) for p in paths if p is not None]
    if not real:
        return [None] * len(paths), None
    room = width - used - BORDER
    styles = (("full", str), ("name", lambda p: p.name), ("id", short_id))
    for style, cell in styles:
        if max(len(cell(p)) for p in real) <= room or style == "id":
            break
    cells = [None if p is None else cell(Path(p)) for p in paths]
    if style == "full":
        return cells, None
    dirs = sorted({str(p.parent) for p in real})
    where = dirs[0] if len(dirs) == 1 else ", ".join(dirs)
    note = "ids: the time…digest in the file names" if style == "id" else "the files"
    return cells, f"results in {where}/ ({note})"


def drop_to_fit(heads: list[str], rows: list[list[str]], optional: Sequence[str], reserve: int,
                width: int) -> list[int]:
    """The indexes of the columns to show: ``optional`` ones (in that order) are dropped while
    the table, with ``reserve`` more characters (the path column), is wider than ``width``."""
    keep = list(range(len(heads)))
    for name in optional:
        cols = [[heads[i], *(r[i] for r in rows)] for i in keep]
        if table_width(cols) + reserve <= width:
            break
        keep.remove(heads.index(name))
    return keep


def clause_wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    """``text`` as lines of at most ``width`` characters where its clauses allow: broken only
    after ``"; "`` or ``": "``, and on the first line only once it holds half the width (a short lead such
    as ``failed: dev-a (busy): busy: `` stays with what follows); a clause longer than a line is
    broken after its ``", "``, and a part of it longer than a line stays whole."""
    pieces = [part for clause in re.findall(r".+?(?:; |: |$)", text)
              for part in (re.findall(r".+?(?:, |$)", clause) if len(clause) > width - len(indent) else [clause])
              if part]
    lines: list[str] = []
    line = ""
    for piece in pieces:
        lead_done = len(line) > width // 2 if not lines else line.strip() != ""
        if lead_done and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = indent + piece
        else:
            line += piece
    if line.strip():
        lines.append(line.rstrip())
    return lines
