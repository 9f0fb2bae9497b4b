"""No import cycle inside edgeforge: every module-level and function-level import counts."""
from __future__ import annotations

import textwrap

import import_graph


def test_edgeforge_has_no_import_cycle():
    found = import_graph.cycles(import_graph.graph())
    assert found == [], "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_walker_sees_relative_and_lazy_imports(tmp_path):
    """The check itself can fail: a cycle through a relative, function-level import is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b  # a package importing its own: no cycle\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text(textwrap.dedent("""
        def later():
            from ..a import x   # lazy, relative, two levels up
            return x
    """))
    (pkg / "c.py").write_text("import pkg.sub.b\n")
    g = import_graph.graph(tmp_path, "pkg")
    assert g["pkg.a"] == {"pkg.sub.b"} and g["pkg.sub.b"] == {"pkg.a"} and g["pkg.c"] == {"pkg.sub.b"}
    assert import_graph.cycles(g) == [["pkg.a", "pkg.sub.b", "pkg.a"]]
