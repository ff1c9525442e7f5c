"""Workload mixes: how many concurrent streams run each TPC-H query, e.g. ``4Q6,4Q9,4Q13``.

A mix is written compactly (``"4Q6,4Q9,4Q13"``) or as a YAML list, each item either a
compact term (``- 4Q6``) or a mapping (``- {query: Q6, streams: 4}``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import yaml

from harmony_base.errors import WorkloadError
from workloads.tpch.queries import QUERY_NAMES

_TERM = re.compile(r"^\s*(?P<count>[+-]?\d+)\s*[*x]?\s*[Qq](?P<query>\d+)\s*$")


@dataclass(frozen=True)
class Mix:
    """Streams per query, in the order written; every count is >= 1 and every query Q1..Q22."""

    streams: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not self.streams:
            raise WorkloadError("a workload mix needs at least one term like 4Q6, but got none")
        seen: set[str] = set()
        for query, count in self.streams:
            if query not in QUERY_NAMES:
                raise WorkloadError(
                    f"a workload mix names TPC-H queries Q1..Q22, but got {query!r}"
                )
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise WorkloadError(
                    f"the stream count for {query} must be a whole number >= 1, but got {count!r}"
                )
            if query in seen:
                raise WorkloadError(
                    f"{query} appears twice in the mix; give it once with the total stream count"
                )
            seen.add(query)

    @property
    def queries(self) -> tuple[str, ...]:
        """The queries of the mix, in the order written."""
        return tuple(query for query, _ in self.streams)

    @property
    def total_streams(self) -> int:
        """How many concurrent connections the mix opens."""
        return sum(count for _, count in self.streams)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.streams)

    def __str__(self) -> str:
        return ",".join(f"{count}{query}" for query, count in self.streams)


def _parse_term(term: str, whole: str) -> tuple[str, int]:
    match = _TERM.match(term)
    if match is None and re.match(r"^\s*[Qq]\d+\s*$", term):
        raise WorkloadError(
            f"each term of a workload mix needs a stream count before the query, like "
            f"1{term.strip().upper()}, but got {term.strip()!r} in {whole!r}"
        )
    if match is None:
        raise WorkloadError(
            f"each term of a workload mix must be <streams>Q<query> like 4Q6, but got "
            f"{term.strip()!r} in {whole!r}"
        )
    count = int(match["count"])
    query = f"Q{int(match['query'])}"
    if query not in QUERY_NAMES:
        raise WorkloadError(
            f"TPC-H has queries Q1..Q22, but the mix {whole!r} asks for {match['query']!r} "
            f"in {term.strip()!r}"
        )
    if count < 1:
        raise WorkloadError(
            f"the stream count in {term.strip()!r} must be >= 1, but got {count} "
            f"(mix {whole!r})"
        )
    return query, count


def _parse_item(item: object, whole: str) -> tuple[str, int]:
    if isinstance(item, str):
        return _parse_term(item, whole)
    if isinstance(item, Mapping):
        unknown = set(item) - {"query", "streams"}
        if unknown or "query" not in item or "streams" not in item:
            raise WorkloadError(
                "a workload mix list item must be like '4Q6' or {query: Q6, streams: 4}, "
                f"but got {dict(item)!r}"
            )
        query_text = str(item["query"]).strip().upper()
        query = query_text if query_text.startswith("Q") else f"Q{query_text}"
        streams = item["streams"]
        if isinstance(streams, bool) or not isinstance(streams, int):
            raise WorkloadError(
                f"streams for {query} must be a whole number >= 1, but got {streams!r}"
            )
        return _parse_term(f"{streams}{query}", whole)
    raise WorkloadError(
        f"a workload mix list item must be like '4Q6' or {{query: Q6, streams: 4}}, "
        f"but got {item!r}"
    )


#: a mix as a config gives it: ``"4Q6,4Q9"``, a YAML list (text or loaded), or a Mix
MixSpec = Mix | str | Sequence[object]


def parse_mix(spec: MixSpec) -> Mix:
    """Parse ``"4Q6,4Q9"``, a YAML list (text or already loaded), or return a Mix as is."""
    if isinstance(spec, Mix):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("[") or "\n" in text or text.startswith("- "):
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise WorkloadError(f"the workload mix is not valid YAML: {exc}") from exc
            if not isinstance(loaded, list):
                raise WorkloadError(f"a YAML workload mix must be a list, but got {loaded!r}")
            return parse_mix(loaded)
        if not text:
            raise WorkloadError("a workload mix needs at least one term like 4Q6, but got ''")
        return Mix(tuple(_parse_term(term, text) for term in text.split(",")))
    if isinstance(spec, Sequence):
        whole = repr(list(spec))
        return Mix(tuple(_parse_item(item, whole) for item in spec))
    raise WorkloadError(f"a workload mix must be text like '4Q6,4Q9' or a list, got {spec!r}")
