"""benchmarks/README.md is an index, not a diary: short, one current row per benchmark, and
``benchmarks/results/`` holds what the index (or a page that cites an earlier result) links,
nothing else; history is git's.

A result file is covered when benchmarks/README.md links it, when a page of
:data:`CITING_DOCS` names it (a link, or a ``benchmarks/results/...`` path or glob), when it is
the JSON written beside a covered Markdown table, or when it lies in a linked folder. Paths the
code, the configs and the tests cite in comments must exist too (a benchmark's own docstring names
the files it writes, so benchmarks/ is not scanned).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "benchmarks" / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
MAX_CHARS = 30_000
#: pages that cite earlier results the index no longer lists (the evidence a design rests on)
CITING_DOCS = ("docs/tuning-under-noise.md", "docs/bme.md", "docs/replicas.md",
               "docs/live-mode.md", "docs/tuning-postgresql.md", "docs/workloads.md",
               "docs/sessions.md")
#: where code, configs and tests cite result files in comments
CITING_CODE = ("harmony/**/*.py", "harmony_server/**/*.py", "tuner_client/**/*.py",
               "workloads/**/*.py", "bme/**/*.py", "strategies/**/*.py", "plugins/**/*.py",
               "configs/*.yaml", "tests/*.py")

INDEX_LINK = re.compile(r"\]\(results/([^)\s]+)\)")
DOC_LINK = re.compile(r"\]\((?:\.\./)?benchmarks/results/([^)\s#]+)\)")
#: a cited path: ``benchmarks/results/NAME`` where NAME ends in a file extension or a ``*``
CITED = re.compile(r"benchmarks/results/([\w.,*\[\]-]+?(?:\.(?:md|json|npz)|\*))(?![\w.*-])")


def _files() -> list[str]:
    return sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file())


def _matches(pattern: str, files: list[str]) -> set[str]:
    return {f for f in files if fnmatch.fnmatch(f, pattern)}


def _index_links() -> list[str]:
    return INDEX_LINK.findall(INDEX.read_text(encoding="utf-8"))


def _doc_citations() -> set[str]:
    found: set[str] = set()
    for doc in CITING_DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        found |= set(DOC_LINK.findall(text)) | set(CITED.findall(text))
    return found


def _code_citations() -> dict[str, set[str]]:
    """Pattern -> the files citing it (comments and docstrings that name a result)."""
    found: dict[str, set[str]] = {}
    for pattern in CITING_CODE:
        for path in ROOT.glob(pattern):
            if path == Path(__file__).resolve():
                continue
            for cited in CITED.findall(path.read_text(encoding="utf-8")):
                found.setdefault(cited, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_the_index_is_short() -> None:
    size = len(INDEX.read_text(encoding="utf-8"))
    assert size <= MAX_CHARS, (f"benchmarks/README.md has {size:,} characters (at most "
                               f"{MAX_CHARS:,}): keep one current row per benchmark; the "
                               "history is git's")


def test_every_result_the_index_links_exists() -> None:
    links = _index_links()
    assert len(links) > 60  # the index was read
    missing = [link for link in links if not (RESULTS / link).exists()]
    assert missing == []


def test_every_result_file_is_linked() -> None:
    files = _files()
    covered: set[str] = set()
    for link in _index_links():
        covered |= {f for f in files if f.startswith(link)} if link.endswith("/") else {link}
    for cited in _doc_citations():
        matched = _matches(cited, files)
        assert matched, f"a page cites benchmarks/results/{cited}, which is not there"
        covered |= matched
    covered |= {f[:-len(".md")] + ".json" for f in covered if f.endswith(".md")}
    unlinked = [f for f in files if f not in covered]
    assert unlinked == [], ("result files no row of benchmarks/README.md (nor a page of "
                            f"CITING_DOCS) links; git rm them (git keeps them): {unlinked}")


def test_every_result_the_code_cites_exists() -> None:
    files = _files()
    citations = _code_citations()
    assert "evidence_estimators.quick.md" in citations  # the scan reads the code's comments
    missing = {cited: sorted(where) for cited, where in citations.items()
               if not _matches(cited, files)}
    assert missing == {}, f"cited but not in benchmarks/results/: {missing}"


def test_the_citation_pattern_reads_paths_and_globs() -> None:
    text = ("see benchmarks/results/x.s12.md and ``benchmarks/results/evidence_power.*s12*``, "
            "(benchmarks/results/a,b.json) and benchmarks/results/ alone")
    assert CITED.findall(text) == ["x.s12.md", "evidence_power.*s12*", "a,b.json"]
    assert _matches("t.s1[23]q*.md", ["t.s12q.md", "t.s13q-1.md", "t.s14q.md"]) == {
        "t.s12q.md", "t.s13q-1.md"}
