"""issue 44: every edgeforge.toml table ([model], [data], [task], [preprocess], [postprocess],
[quantization.qat], [prune]) and devices.toml, with one leaf (or a few) given a hostile value:
NaN, infinities, 1e308, sizes past any image, negative and 64-bit integers, quotes, newlines,
markup, path escapes. Through the CLI (in-process): only documented exit codes, at most one
`error:` line, no traceback, nothing written outside the output directory (the project, the
inventory and the cache are as they were). A bounded example count in the default suite; the
same properties with ten times the examples under `slow`."""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
import tomli
from hypothesis import given, settings
from hypothesis import strategies as st
from test_config_fuzz import DEVICES, PROJECT, SETTINGS, _check, _cli, dumps

RICH = PROJECT + """
[task]
kind = "classification"
top_k = 5
score_threshold = 0.5
max_metric_drop = 1.0
label_names = ["zero", "one"]

[preprocess]
input = "x"
images = "images"
resize = [32, 32]
interpolation = "bilinear"
channel_order = "rgb"
scale = 0.00392156862745098
mean = [0.5, 0.5, 0.5]
std = [0.25, 0.25, 0.25]
layout = "NCHW"
tolerance = 0.001

[postprocess]
op = "topk"
output = 0
k = 5

[quantization.qat]
steps = 30
max_seconds = 60.0
lr = 0.0001
batch_size = 16

[prune]
flops = 0.3
steps = 10
"""
RICH_DEVICES = DEVICES + """
[devices.jetson-2]
host = "10.0.0.7"
target = "jetson-orin"
workdir = "~/edgeforge"
tags = ["lab"]
"""
HOSTILE = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, 0.0, -0.0,
                     16384, 60000, 2**31, 2**63 - 1, -2**63, -1, 0,
                     "a\"b", "x\ny", "<b>x</b>", "[task]\nkind = \"ctc\"", "'", "\\", "../../etc/passwd", "~",
                     "/", "", " ", "x" * 300, "model:build", "NaN", [], {}, [float("nan")] * 3, [1e308] * 3,
                     [60000, 60000], [0.5, 0.5], [-1, -1]]),
    st.floats(), st.integers(-2**63, 2**63 - 1), st.text(max_size=30),
    st.lists(st.one_of(st.floats(), st.integers(-2**40, 2**40)), max_size=4))


def _leaves(node, path=()):
    """Every (path, value) of a parsed TOML document, lists' items included."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(node, list) and node and isinstance(node[0], (dict, list)):
        for i, v in enumerate(node):
            yield from _leaves(v, (*path, i))
    else:
        yield path, node


@st.composite
def hostile(draw, base: str):
    """``base`` with one to three leaves set to hostile values (as TOML text)."""
    doc = tomli.loads(base)
    paths = [p for p, _ in _leaves(doc)]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        node = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = copy.deepcopy(draw(HOSTILE))
    return dumps(doc)


@st.composite
def nonfinite(draw, base: str):
    """``base`` with one leaf (or one item of a list of numbers) set to NaN or an infinity:
    (text, the key's dotted path)."""
    doc = tomli.loads(base)
    path = draw(st.sampled_from([p for p, _ in _leaves(doc)]))
    node = doc
    for part in path[:-1]:
        node = node[part]
    value = draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    leaf = node[path[-1]]
    if isinstance(leaf, list) and leaf and all(isinstance(x, (int, float)) for x in leaf):
        i = draw(st.integers(0, len(leaf) - 1))
        leaf[i], path = value, (*path, i)
    else:
        node[path[-1]] = value
    return dumps(doc), ".".join(map(str, path))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _project_case(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "proj").mkdir()
        (root / "proj" / "edgeforge.toml").write_text(text, errors="surrogatepass")
        before = _tree(root)
        code, out = _cli("build", str(root / "proj"), "--target", "linux-x86", "--out", str(root / "out"),
                         env={"EDGEFORGE_CACHE": str(root / "cache")})
        _check(code, out)
        assert code == 2, out              # no data files: no build can start
        after = {k: v for k, v in _tree(root).items() if not k.startswith(("out/", "cache/"))}
        assert after == before, sorted(set(after) ^ set(before))
        assert not (root / "out").exists(), out


def _devices_case(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        inv = Path(d) / "devices.toml"
        inv.write_text(text, errors="surrogatepass")
        before = _tree(Path(d))
        for argv in (("devices", "--inventory", str(inv)), ("devices", "--inventory", str(inv), "--json")):
            _check(*_cli(*argv))
        assert _tree(Path(d)) == before


def test_the_rich_project_gets_past_config():
    # the control: every table as given is accepted; the build stops only at the data files
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "edgeforge.toml").write_text(RICH)
        code, out = _cli("build", d, "--target", "linux-x86", "--out", str(Path(d) / "out"))
    assert code == 2 and "calibration data not found" in out, out


@settings(SETTINGS, max_examples=40)     # 20 s of 2 loaded cores at 80; the _longer twin runs 800
@given(hostile(RICH))
def test_every_project_table_with_hostile_values(text):
    _project_case(text)


@settings(SETTINGS, max_examples=40)
@given(hostile(RICH_DEVICES))
def test_devices_toml_with_hostile_values(text):
    _devices_case(text)


@settings(SETTINGS, max_examples=40)
@given(nonfinite(RICH))
def test_a_nan_or_infinity_anywhere_is_refused_at_config_naming_its_key(case):
    text, key = case
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "edgeforge.toml").write_text(text)
        code, out = _cli("build", d, "--target", "linux-x86", "--out", str(Path(d) / "out"))
    _check(code, out)
    [line] = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert code == 2 and "not found" not in line, line
    assert f"{key}:" in line or f"{key.rsplit('.', 1)[0]}:" in line, (key, line)


@pytest.mark.slow
@settings(SETTINGS, max_examples=800)
@given(hostile(RICH))
def test_every_project_table_with_hostile_values_longer(text):
    _project_case(text)


@pytest.mark.slow
@settings(SETTINGS, max_examples=400)
@given(hostile(RICH_DEVICES))
def test_devices_toml_with_hostile_values_longer(text):
    _devices_case(text)


LAB_DEVICES = RICH_DEVICES + """
[labgrid]
coordinator = "127.0.0.1:{port}"
where = {{ board = "rpi4" }}

[labgrid.defaults.rpi4]
target = "rpi4"
python = "python3"
workdir = "/home/pi/edgeforge/{{place}}"
identity = "~/.ssh/lab_ed25519"
"""


@pytest.mark.slow
@settings(SETTINGS, max_examples=30)
@given(st.data())
def test_a_labgrid_table_with_hostile_values(data):
    """Its coordinator does not answer (a closed loopback port): the lab's error or the table's
    own, never more (each example runs the real labgrid client: about a second)."""
    from edgeforge.device.provision.localsshd import free_port

    _devices_case(data.draw(hostile(LAB_DEVICES.format(port=free_port()))))
