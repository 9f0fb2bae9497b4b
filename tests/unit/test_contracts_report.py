"""The report shows load time and execution-provider placement, with a partial placement as a
warning, in Markdown and HTML (no paddle)."""
from __future__ import annotations

from result_factory import make_result

from edgeforge.report.html import render_html
from edgeforge.report.markdown import render_markdown
from edgeforge.report.report import build_summary
from edgeforge.runner.placement import placement_summary


def _results():
    orin = make_result(device="orin-1", target="jetson-orin", backend="onnx", precision="int8",
                       runtime=("onnxruntime", "1.23.2"))
    orin["runtime"]["placement"] = placement_summary({"CUDAExecutionProvider": 3, "TensorrtExecutionProvider": 46},
                                                     49, "TensorrtExecutionProvider", [])
    orin["runtime"]["load"] = {"first_ms": 8123.5, "warm_ms": 412.25}
    pi = make_result(device="pi-1")                          # a result without them (older runner)
    return [orin, pi]


def test_markdown_and_html_show_load_time_and_placement():
    results = _results()
    summary = build_summary([(f"r{i}.json", r) for i, r in enumerate(results)])
    md = render_markdown(summary)
    section = md.split("## Load time and placement", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| R")]
    assert rows == ["| R1 | orin-1 | 8123.500 | 412.250 | 46/49 on TensorrtExecutionProvider |"]
    assert all(len(line) <= 80 for line in section.splitlines() if line.startswith("|"))
    assert "R1 warning: partial placement: 46/49 nodes on TensorrtExecutionProvider; 3 on CUDAExecutionProvider" \
        in section
    html = render_html(summary, results)
    assert 'id="runtime"' in html and "46/49 on TensorrtExecutionProvider" in html and "8123.500" in html
