"""issue 44, through the real CLI (in-process): each crafted document of the issue is exit 2
naming the file and the field in every verb that reads it; a negative p50 passes no gate; the
report's and the gate's output files replace only what edgeforge wrote; report.md escapes
names edgeforge did not write (rendered by a real CommonMark renderer, markdown-it-py)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from result_factory import make_result
from test_config_fuzz import _check, _cli
from test_documents_fuzz import DEEP, _profile, dumps


def _pair(tmp_path: Path, edit=None) -> tuple[str, str]:
    """fp32 and INT8 results of one model on one device (each with a profile); ``edit`` changes
    the INT8 one before it is written as a crafted file would be (NaN, Infinity kept)."""
    fp32 = make_result(precision="fp32", median_ms=5.4, seed=2, n=40)
    int8 = make_result(median_ms=3.1, seed=1, n=40)
    fp32["profile"], int8["profile"] = _profile(3.5), _profile(2.0)
    if edit:
        edit(int8)
    d = tmp_path / "results"
    d.mkdir(exist_ok=True)
    (d / "fp32.json").write_text(json.dumps(fp32))
    (d / "int8.json").write_text(dumps(int8))
    return str(d / "fp32.json"), str(d / "int8.json")


def _set(path: str, value):
    def edit(doc):
        *head, last = path.split(".")
        node = doc
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[int(last) if isinstance(node, list) else last] = value
    return edit


CRAFTED = [
    ("profile", "x", "'profile'"),
    ("profile.total_ms", float("inf"), "'profile.total_ms'"),
    ("profile.by_op.0.ms", -1, "'profile.by_op.0.ms'"),
    ("profile.by_op", {"op": "Conv"}, "'profile.by_op'"),
    ("profile.by_op.0.share", "70%", "'profile.by_op.0.share'"),
    ("summary.p50_ms", -3.1, "'summary.p50_ms'"),
    ("summary.p99_ms", float("nan"), "'summary.p99_ms'"),
    ("drift.accuracy_drop", "0.6", "'drift.accuracy_drop'"),
    ("drift.task", {"drop": float("-inf")}, "'drift.task.drop'"),
    ("settings.runs", -40, "'settings.runs'"),
    ("artifact.size_bytes", -1, "'artifact.size_bytes'"),
    ("device.fingerprint.note", DEEP, "nested more than 64 levels deep"),
]


@pytest.mark.parametrize("path, value, named", CRAFTED, ids=[c[0] + "=" + repr(c[1])[:12] for c in CRAFTED])
def test_a_crafted_result_is_exit_2_naming_the_file_and_the_field(tmp_path, path, value, named):
    a, b = _pair(tmp_path, _set(path, value))
    out = tmp_path / "out"
    for argv in [("report", b, "--out", str(out / "report")), ("profile", b), ("profile", a, b), ("compare", a, b),
                 ("gate", b, "--max-p50-ms", "100", "--junit", str(out / "junit.xml"))]:
        code, text = _cli(*argv)
        _check(code, text)
        [line] = [ln for ln in text.splitlines() if ln.startswith("error:")]
        assert code == 2 and "int8.json" in line and named in line, (argv, text)
    assert not out.exists()


def test_a_negative_p50_passes_no_latency_gate(tmp_path):
    """The case of the issue: summary.p50_ms = -1 passed --max-p50-ms. The samples are the
    measurement; a summary that contradicts them is refused too."""
    _, b = _pair(tmp_path, _set("summary.p50_ms", -1.0))
    code, text = _cli("gate", b, "--max-p50-ms", "5")
    assert code == 2 and "'summary.p50_ms'" in text and "greater than or equal to 0" in text, text
    _, good = _pair(tmp_path / "g" if (tmp_path / "g").mkdir() is None else tmp_path)
    assert _cli("gate", good, "--max-p50-ms", "5")[0] == 0
    assert _cli("gate", good, "--max-p50-ms", "1")[0] == 1


# ---------------------------------------------------------------- owned files

def test_gate_junit_replaces_its_own_file_and_never_a_users(tmp_path):
    _, b = _pair(tmp_path)
    junit = tmp_path / "junit.xml"
    assert _cli("gate", b, "--max-p50-ms", "100", "--junit", str(junit))[0] == 0
    first = junit.read_bytes()
    assert b'<testsuites name="edgeforge gates"' in first
    assert _cli("gate", b, "--max-p50-ms", "1", "--junit", str(junit))[0] == 1     # ours: replaced
    assert junit.read_bytes() != first and b"<failure" in junit.read_bytes()
    for mine in (b"my notes, not XML\n", b'<?xml version="1.0"?><testsuites name="nightly"/>\n'):
        junit.write_bytes(mine)
        code, text = _cli("gate", b, "--max-p50-ms", "100", "--junit", str(junit))
        _check(code, text)
        assert code == 2 and "--junit" in text and str(junit) in text and "did not write" in text, text
        assert junit.read_bytes() == mine
    link = tmp_path / "link.xml"
    link.symlink_to(tmp_path / "elsewhere.xml")
    code, text = _cli("gate", b, "--max-p50-ms", "100", "--junit", str(link))
    assert code == 2 and "a symlink" in text and not (tmp_path / "elsewhere.xml").exists(), text


@pytest.mark.parametrize("name", ["report.md", "report.html", "summary.json"])
def test_report_out_replaces_its_own_report_and_never_a_users_file(tmp_path, name):
    a, b = _pair(tmp_path)
    out = tmp_path / "r"
    assert _cli("report", a, b, "--out", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert _cli("report", b, "--out", str(out))[0] == 0                 # an earlier report: replaced
    assert {p.name: p.read_bytes() for p in out.iterdir()} != before
    user = tmp_path / "user"
    user.mkdir()
    (user / name).write_text("# my own notes\n")
    code, text = _cli("report", a, b, "--out", str(user))
    _check(code, text)
    assert code == 2 and "--out" in text and str(user / name) in text and "did not write" in text, text
    assert [p.name for p in user.iterdir()] == [name] and (user / name).read_text() == "# my own notes\n"


# ---------------------------------------------------------------- Markdown

HOSTILE_NAMES = {"device": '<script>alert("d")</script>', "name": "<img src=x onerror=alert(1)>",
                 "target": "a|b|c", "backend": "`rm -rf`", "cpu": "[click](javascript:alert(1)) *bold* _em_"}


def test_report_md_escapes_names_it_did_not_write(tmp_path):
    from markdown_it import MarkdownIt

    h = HOSTILE_NAMES

    def edit(doc):
        doc["device"]["name"] = h["device"]
        doc["artifact"]["name"] = h["name"]
        doc["device"]["fingerprint"]["cpu_model"] = h["cpu"]
        doc["artifact"]["target"], doc["artifact"]["backend"] = h["target"], h["backend"]
    a, b = _pair(tmp_path, edit)
    fp32 = json.loads(Path(a).read_text())
    edit(fp32)
    Path(a).write_text(json.dumps(fp32))
    code, text = _cli("report", a, b, "--out", str(tmp_path / "r"))
    assert code == 0, text
    md = (tmp_path / "r" / "report.md").read_text()
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    for bad in ("<script", "<img", 'href="javascript', "<em>bold</em>", "<em>em</em>"):
        assert bad not in html, bad
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    tables = html.split("<table>")[1:]
    assert len(tables) >= 3
    for table in tables:              # every row keeps its columns: no pipe from a name splits one
        rows = re.findall(r"<tr>(.*?)</tr>", table.split("</table>")[0], flags=re.S)
        counts = {len(re.findall(r"<t[hd][ >]", row)) for row in rows}
        assert len(counts) == 1, rows
    assert "a|b|c/`rm -rf`" in html and "<code>rm -rf</code>" not in html
