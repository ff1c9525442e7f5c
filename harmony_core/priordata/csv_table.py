"""CSV: ``#`` comment lines for the metadata, then one row per trial with a column per
parameter; cells are read back as their parameter's type."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from harmony_base.errors import ConfigError, HarmonyError
from harmony_base.hostinfo import HostInfo
from harmony_base.jsontypes import JSON
from harmony_base.space import EnumParam, IntParam, Param, RealParam, Value
from harmony_base.trial import SessionStatus, TrialRecord, TrialStatus
from harmony_core.definition import SessionDefinition
from harmony_core.priordata.fields import FORMAT_VERSION, check_version, iso, read_host, read_json
from harmony_core.priordata.model import PriorSession

#: the columns before the parameters' (the first one also tells CSV from the text log)
CSV_FIXED_COLUMNS = ("trial", "candidate", "client", "status", "value", "failure", "leased_at",
                     "reported_at")


def to_csv(prior: PriorSession) -> str:
    """CSV with ``#`` comment lines for the metadata, then one row per trial.

    Columns: trial, candidate, client, status, value, failure, leased_at, reported_at, then
    one column per parameter. Empty cells are missing values.
    """
    buf = io.StringIO()
    buf.write(f"# harmony prior data, format {FORMAT_VERSION}\n")
    buf.write(f"# session: {json.dumps(prior.name)}\n")
    buf.write(f"# status: {json.dumps(prior.status)}\n")
    buf.write(f"# created: {json.dumps(prior.created)}\n")
    buf.write(f"# started: {iso(prior.created)}\n")
    buf.write(f"# definition: {json.dumps(prior.definition, sort_keys=True)}\n")
    for host in prior.hosts:
        buf.write(f"# host: {json.dumps(asdict(host))}\n")
    params = prior.parameter_names
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*CSV_FIXED_COLUMNS, *params])
    for t in prior.trials:
        writer.writerow([t.id, t.candidate, _cell(t.client), t.status.value, _cell(t.value),
                         _cell(t.failure), _cell(t.leased_at), _cell(t.reported_at),
                         *(_cell(t.point.get(p)) for p in params)])
    return buf.getvalue()


def from_csv(text: str, *, source: str = "CSV file") -> PriorSession:
    """Read a CSV written by :func:`to_csv`; parameter cells get their parameter's type."""
    lines = text.splitlines(keepends=True)
    header: dict[str, Any] = {}
    hosts: list[HostInfo] = []
    body_start = 0
    if not lines or not lines[0].startswith("# harmony prior data"):
        raise ConfigError(f"{source}: not a harmony prior-data CSV (the first line must be "
                          f"'# harmony prior data, format {FORMAT_VERSION}')")
    check_version(lines[0].strip().rsplit(" ", 1)[-1], source)
    for number, line in enumerate(lines, start=1):
        if not line.startswith("#"):
            body_start = number - 1
            break
        key, _, raw = line[1:].strip().partition(": ")
        where = f"{source}, line {number}"
        if key in ("session", "status", "created", "definition"):
            header[key] = read_json(raw, where)
        elif key == "host":
            hosts.append(read_host(read_json(raw, where), where))
    else:
        body_start = len(lines)
    if "definition" not in header:
        raise ConfigError(f"{source}: the '# definition:' line is missing")
    definition = header["definition"]
    types = _parameter_types(definition, source)
    reader = csv.reader(io.StringIO("".join(lines[body_start:])))
    columns = next(reader, None)
    if columns is None or tuple(columns[:len(CSV_FIXED_COLUMNS)]) != CSV_FIXED_COLUMNS:
        raise ConfigError(f"{source}: the header row must start with "
                          f"{list(CSV_FIXED_COLUMNS)}, got {columns}")
    params = columns[len(CSV_FIXED_COLUMNS):]
    trials = []
    for row_number, row in enumerate(reader, start=body_start + 2):
        where = f"{source}, line {row_number}"
        if len(row) != len(columns):
            raise ConfigError(f"{where}: {len(row)} cells, the header has {len(columns)}")
        cells = dict(zip(columns, row, strict=True))
        try:
            point = {p: _parse_param(cells[p], types.get(p), p) for p in params if cells[p] != ""}
            trials.append(TrialRecord(
                id=int(cells["trial"]), candidate=int(cells["candidate"]),
                point=point, client=cells["client"] or None,
                status=TrialStatus.parse(cells["status"]),
                value=float(cells["value"]) if cells["value"] else None,
                failure=cells["failure"] or None,
                leased_at=float(cells["leased_at"]) if cells["leased_at"] else None,
                reported_at=float(cells["reported_at"]) if cells["reported_at"] else None))
        except (ValueError, HarmonyError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return PriorSession(name=header.get("session", definition.get("name", "")),
                        definition=definition, created=header.get("created"), trials=trials,
                        hosts=hosts, status=SessionStatus.parse(header.get("status", "closed")))


def _cell(v: Value | None) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _parameter_types(definition: Mapping[str, JSON], source: str) -> dict[str, Param]:
    try:
        space = SessionDefinition.from_dict(definition, source=source).space
    except ConfigError:
        return {}  # an unknown strategy or plugin: fall back to reading the cells as written
    return {p.name: p for p in space.params}


def _parse_param(cell: str, param: Param | None, name: str) -> Value:
    """A CSV cell as its parameter's type (int, float, or one of an enum's values)."""
    if isinstance(param, IntParam):
        return int(cell)
    if isinstance(param, RealParam):
        return float(cell)
    if isinstance(param, EnumParam):
        for v in param.values:
            if _cell(v) == cell:
                return v
        raise ConfigError(f"parameter {name}: {cell!r} is not one of {list(param.values)}")
    return _guess(cell)


def _guess(cell: str) -> Value:
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(cell, cell)
