"""The text log: ``# key: JSON`` header lines, then one tab-separated ``key=JSON`` line per
trial."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from harmony_base.errors import ConfigError
from harmony_base.hostinfo import HostInfo
from harmony_base.jsontypes import JSONObject
from harmony_base.trial import FIELD_ORDER, SessionStatus, TrialRecord
from harmony_base.version import __version__
from harmony_core.priordata.fields import (
    FORMAT_VERSION,
    check_version,
    iso,
    read_host,
    read_json,
    read_trial,
)
from harmony_core.priordata.model import PriorSession


def to_text(prior: PriorSession) -> str:
    """The text log: ``# key: JSON`` header lines, then one tab-separated line per trial."""
    out = [f"# harmony prior data, format {FORMAT_VERSION}",
           f"# session: {json.dumps(prior.name)}",
           f"# status: {json.dumps(prior.status)}",
           f"# created: {json.dumps(prior.created)}",
           f"# started: {iso(prior.created)}",
           f"# exported: {iso(datetime.now(UTC).timestamp())} by harmony {__version__}",
           f"# definition: {json.dumps(prior.definition, sort_keys=True)}"]
    for host in prior.hosts:
        out.append(f"# host: {json.dumps(asdict(host))}")
    out.append("# columns: " + " ".join(FIELD_ORDER))
    for trial in prior.trials:
        data = trial.to_dict()
        out.append("\t".join(f"{k}={json.dumps(data[k], allow_nan=False)}" for k in FIELD_ORDER))
    return "\n".join(out) + "\n"


def from_text(text: str, *, source: str = "text log") -> PriorSession:
    """Read a text log written by :func:`to_text`."""
    header: dict[str, Any] = {}
    hosts: list[HostInfo] = []
    trials: list[TrialRecord] = []
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# harmony prior data"):
        raise ConfigError(f"{source}: not a harmony prior-data log (the first line must be "
                          f"'# harmony prior data, format {FORMAT_VERSION}')")
    check_version(lines[0].rsplit(" ", 1)[-1], source)
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{source}, line {number}"
        if line.startswith("#"):
            key, _, raw = line[1:].strip().partition(": ")
            if key in ("session", "status", "created", "definition"):
                header[key] = read_json(raw, where)
            elif key == "host":
                hosts.append(read_host(read_json(raw, where), where))
            continue  # started, exported, columns: for people
        row: JSONObject = {}
        for cell in line.split("\t"):
            key, sep, raw = cell.partition("=")
            if not sep:
                raise ConfigError(f"{where}: expected key=JSON cells separated by tabs, got "
                                  f"{cell[:60]!r}")
            row[key] = read_json(raw, where)
        trials.append(read_trial(row, where))
    missing = [k for k in ("session", "definition") if k not in header]
    if missing:
        raise ConfigError(f"{source}: header lines {missing} are missing")
    return PriorSession(name=header["session"], definition=header["definition"],
                        created=header.get("created"), trials=trials, hosts=hosts,
                        status=SessionStatus.parse(header.get("status", "closed")))
