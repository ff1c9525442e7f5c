"""The docs point at things that exist: every relative link in README.md, docs/*.md and
benchmarks/README.md resolves (the file, and the heading an ``#anchor`` names), and every
repository path written alone in backticks (```tuner_client/flows.py```) names a file or
folder of the repository. A renamed module fails here until the docs follow it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "benchmarks" / "README.md"]
#: top-level folders whose paths the docs cite in backticks
TOP = ("harmony", "harmony_base", "harmony_core", "harmony_report",
       "harmony_server", "tuner_client", "plugins", "strategies", "workloads", "bme",
       "configs", "benchmarks", "tests", "docs", "deploy", ".ci")

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _prose(path: Path) -> str:
    """The page without its fenced code blocks (shell comments there are not headings)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link's text only
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", _prose(path), flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slug_follows_github() -> None:
    assert slug("What it buys, measured") == "what-it-buys-measured"
    assert slug("Tuning PostgreSQL with `harmony tune`") == "tuning-postgresql-with-harmony-tune"
    assert slug("BME probes ([TPC-H](results/x.md))") == "bme-probes-tpc-h"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no heading #{anchor} in {linked.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_paths_in_backticks_exist(page: Path) -> None:
    missing = []
    for span in CODE_SPAN.findall(_prose(page)):
        path = span.split(":")[0].rstrip("/")
        if (" " in span or "/" not in path or path.split("/")[0] not in TOP
                or not re.fullmatch(r"[\w.*/-]+", path)):
            continue
        if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
            missing.append(span)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_checks_see_the_pages() -> None:
    """The scan finds links and paths at all (a regex that matches nothing passes vacuously)."""
    readme = _prose(ROOT / "README.md")
    assert len(LINK.findall(readme)) >= 10
    assert "what-it-buys-measured" in anchors(ROOT / "docs" / "tuning-under-noise.md")
    assert any("/" in s for s in CODE_SPAN.findall(_prose(ROOT / "docs" / "architecture.md")))
