"""What every prior-data format shares: the format version and the readers of times, JSON
header values, trials and hosts (each error names the file and line or element it came from)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from harmony_base.errors import ConfigError, HarmonyError
from harmony_base.hostinfo import HostInfo
from harmony_base.jsontypes import JSON
from harmony_base.trial import TrialRecord

#: version of the three file layouts (bump on an incompatible change)
FORMAT_VERSION = 1


def iso(t: float | None) -> str:
    """``t`` (seconds since the epoch) as ISO 8601 in UTC; "" for None."""
    return "" if t is None else datetime.fromtimestamp(t, UTC).isoformat()


def read_json(raw: str, where: str) -> Any:
    """``raw`` parsed as JSON; malformed JSON is a ConfigError naming ``where``."""
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{where}: malformed JSON: {exc}") from None


def check_version(raw: str, source: str) -> None:
    """Raise unless ``raw`` names :data:`FORMAT_VERSION`."""
    if raw.strip() != str(FORMAT_VERSION):
        raise ConfigError(f"{source}: prior-data format {raw!r} is not supported; this harmony "
                          f"reads format {FORMAT_VERSION}")


def read_trial(row: Mapping[str, JSON], where: str) -> TrialRecord:
    """A trial record from its dict form (errors name ``where``)."""
    try:
        return TrialRecord.from_dict(row, where=where)
    except HarmonyError as exc:
        raise ConfigError(str(exc)) from None


def read_host(data: object, where: str, *, from_text_attrs: bool = False) -> HostInfo:
    """A host from its dict form (``from_text_attrs``: XML attribute strings, numbers converted)."""
    if not isinstance(data, Mapping) or "client_id" not in data:
        raise ConfigError(f"{where}: a host needs at least a client_id, got {data!r}")
    names = {f.name for f in fields(HostInfo)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown host fields {unknown}")
    values = dict(data)
    if from_text_attrs:
        for key in ("joined", "left"):
            values[key] = float_or_none(values.get(key), where)
        for key in ("cpu_count", "ram_bytes"):
            values[key] = int(values[key]) if values.get(key) is not None else None
    return HostInfo(**values)


def float_or_none(raw: str | None, where: str) -> float | None:
    """``raw`` as a float; None or "" as None."""
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{where}: {raw!r} is not a number") from None
