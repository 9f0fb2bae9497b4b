"""README.md fits a screen-sized read (at most 250 lines), every relative link in README.md and
docs/*.md resolves, and every command in README's quick start parses with the real parser
(issue 27)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from edgeforge.cli.main import build_parser
from edgeforge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)          # code blocks hold no links
    return [m.group(1) for m in LINK.finditer(text)]


def test_readme_is_at_most_250_lines():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in _links(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue                                            # a URL, or an anchor on the page
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_link_check_finds_a_broken_link(tmp_path):
    assert _links("see [x](docs/nowhere.md) and ![p](a.png) and ```\n[no](b.md)\n```") == \
        ["docs/nowhere.md", "a.png"]


def quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [ln.split(" #", 1)[0].strip() for ln in block.splitlines() if ln.strip().startswith("edgeforge ")]


def test_quick_start_commands_are_verbs_that_exist():
    commands = quick_start()
    verbs = [shlex.split(c)[1] for c in commands]
    assert verbs == ["init", "build", "bench", "report"]
    parser = build_parser()
    for cmd in commands:
        args = parser.parse_args(shlex.split(cmd)[1:])      # a usage error raises ConfigError
        assert callable(args.func), cmd
    with pytest.raises(ConfigError):
        parser.parse_args(["bild", "--target", "rpi"])
