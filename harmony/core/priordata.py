"""Prior data: a finished session's trials and metadata, in three text formats, read back exactly.

A :class:`PriorSession` is what is worth keeping from a run: the definition (parameters,
ranges, strategy, objective), the hosts its clients ran on, when it started, and every
trial (point, performance or failure, times, client). It is written as a text log, as one
XML document, or as CSV, and each reader rebuilds an equal object (floats are written with
``repr``, so nothing is lost); :func:`to_dict` / :func:`from_dict` are the JSON form the
server's ``GET /priors/{name}`` answers. A core's trials become prior data with
:func:`prior_from_core`; a running server's are read over HTTP by
:mod:`tuner_client.priordata_remote` (the store side in :mod:`harmony_server.priordata_store`); how
a new session starts from them in :mod:`harmony.core.warmstart`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harmony import __version__
from harmony.base.errors import ConfigError, HarmonyError
from harmony.base.hostinfo import HostInfo
from harmony.base.space import EnumParam, IntParam, Param, Point, RealParam, Value
from harmony.base.trial import FIELD_ORDER, SessionStatus, TrialRecord, TrialStatus
from harmony.core.definition import SessionDefinition
from harmony.core.session import SessionCore

__all__ = ["FORMATS", "HostInfo", "PriorSession", "TrialRecord", "dump", "dumps", "from_csv",
           "from_dict", "from_text", "from_xml", "load", "loads", "prior_from_core", "to_csv",
           "to_dict", "to_text", "to_xml"]

logger = logging.getLogger(__name__)

#: version of the three file layouts (bump on an incompatible change)
FORMAT_VERSION = 1
#: format name -> file extension
FORMATS = {"xml": ".xml", "csv": ".csv", "text": ".log"}



@dataclass
class PriorSession:
    """A session's definition, hosts, start time and trials: the unit of prior data."""

    name: str
    definition: dict[str, Any]  # SessionDefinition.to_dict()
    created: float | None
    trials: list[TrialRecord] = field(default_factory=list)
    hosts: list[HostInfo] = field(default_factory=list)
    status: SessionStatus = SessionStatus.CLOSED

    def __post_init__(self) -> None:
        # readers hand over the status as written in the file
        try:
            self.status = SessionStatus.parse(self.status)
        except ConfigError as exc:
            raise ConfigError(f"prior session {self.name!r}: {exc}") from None

    def session_definition(self) -> SessionDefinition:
        """The definition as an object (validated; errors name the session)."""
        return SessionDefinition.from_dict(self.definition, source=f"prior session {self.name!r}")

    @property
    def maximize(self) -> bool:
        return self.definition.get("objective", {}).get("goal") == "maximize"

    @property
    def parameter_names(self) -> list[str]:
        return [p["name"] for p in self.definition.get("parameters", [])]

    def completed(self) -> list[TrialRecord]:
        """Trials with a finite performance value, in trial order."""
        return [t for t in self.trials if t.completed]

    def best(self) -> tuple[Point, float] | None:
        """The best measured point and its value (in the objective's own sign)."""
        done = [(t.value, t) for t in self.completed() if t.value is not None]
        if not done:
            return None
        sign = -1.0 if self.maximize else 1.0
        value, top = min(done, key=lambda pair: sign * pair[0])
        return dict(top.point), float(value)


# ---------------------------------------------------------------------------------------
# JSON (the server's answer to GET /priors/{name})


def to_dict(prior: PriorSession) -> dict[str, Any]:
    """The session as a JSON-ready dict: name, status, created, definition, hosts, trials."""
    return {"format": FORMAT_VERSION, "name": prior.name, "status": prior.status,
            "created": prior.created, "definition": prior.definition,
            "hosts": [asdict(h) for h in prior.hosts],
            "trials": [t.to_dict() for t in prior.trials]}


def from_dict(data: Any, *, source: str = "prior data") -> PriorSession:
    """Read a dict written by :func:`to_dict` (fields checked; errors name ``source``)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: prior data must be a JSON object, got "
                          f"{type(data).__name__}")
    _check_version(str(data.get("format", "")), source)
    missing = [k for k in ("name", "definition") if k not in data]
    if missing or not isinstance(data.get("definition"), Mapping):
        raise ConfigError(f"{source}: prior data needs 'name' and a 'definition' object; "
                          f"missing {missing}")
    trials = data.get("trials") or []
    hosts = data.get("hosts") or []
    if not isinstance(trials, list) or not isinstance(hosts, list):
        raise ConfigError(f"{source}: 'trials' and 'hosts' must be lists")
    created = data.get("created")
    if created is not None and (isinstance(created, bool)
                                or not isinstance(created, int | float)):
        raise ConfigError(f"{source}: 'created' must be seconds since the epoch, got {created!r}")
    return PriorSession(
        name=str(data["name"]), definition=dict(data["definition"]),
        created=float(created) if created is not None else None,
        trials=[_trial(row if isinstance(row, Mapping) else {}, f"{source}, trial {i}")
                for i, row in enumerate(trials)],
        hosts=[_host(h, f"{source}, host {i}") for i, h in enumerate(hosts)],
        status=SessionStatus.parse(data.get("status", "closed")))


# ---------------------------------------------------------------------------------------
# text log


def to_text(prior: PriorSession) -> str:
    """The text log: ``# key: JSON`` header lines, then one tab-separated line per trial."""
    out = [f"# harmony prior data, format {FORMAT_VERSION}",
           f"# session: {json.dumps(prior.name)}",
           f"# status: {json.dumps(prior.status)}",
           f"# created: {json.dumps(prior.created)}",
           f"# started: {_iso(prior.created)}",
           f"# exported: {_iso(datetime.now(UTC).timestamp())} by harmony {__version__}",
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
    _check_version(lines[0].rsplit(" ", 1)[-1], source)
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{source}, line {number}"
        if line.startswith("#"):
            key, _, raw = line[1:].strip().partition(": ")
            if key in ("session", "status", "created", "definition"):
                header[key] = _json(raw, where)
            elif key == "host":
                hosts.append(_host(_json(raw, where), where))
            continue  # started, exported, columns: for people
        row: dict[str, Any] = {}
        for cell in line.split("\t"):
            key, sep, raw = cell.partition("=")
            if not sep:
                raise ConfigError(f"{where}: expected key=JSON cells separated by tabs, got "
                                  f"{cell[:60]!r}")
            row[key] = _json(raw, where)
        trials.append(_trial(row, where))
    missing = [k for k in ("session", "definition") if k not in header]
    if missing:
        raise ConfigError(f"{source}: header lines {missing} are missing")
    return PriorSession(name=header["session"], definition=header["definition"],
                        created=header.get("created"), trials=trials, hosts=hosts,
                        status=SessionStatus.parse(header.get("status", "closed")))


# ---------------------------------------------------------------------------------------
# XML

_XML_ROOT = "harmony-session"


def to_xml(prior: PriorSession) -> str:
    """One XML document: ``<metadata>`` (definition, parameters, hosts, times), ``<data>``."""
    root = ET.Element(_XML_ROOT, {"name": prior.name, "format": str(FORMAT_VERSION),
                                  "status": prior.status})
    meta = ET.SubElement(root, "metadata")
    started = ET.SubElement(meta, "started", _attrs(time=prior.created))
    started.text = _iso(prior.created)
    ET.SubElement(meta, "exported", {"by": f"harmony {__version__}"}).text = _iso(
        datetime.now(UTC).timestamp())
    d = prior.definition
    objective = d.get("objective", {})
    ET.SubElement(meta, "objective", _attrs(name=objective.get("name"),
                                            goal=objective.get("goal")))
    strategy = d.get("strategy", {})
    ET.SubElement(meta, "strategy", _attrs(name=strategy.get("name")
                                           if isinstance(strategy, Mapping) else strategy))
    params = ET.SubElement(meta, "parameters")
    for p in d.get("parameters", []):
        attrs = {k: v for k, v in p.items() if k != "values"}
        element = ET.SubElement(params, "parameter", _attrs(**attrs))
        for v in p.get("values", []):
            ET.SubElement(element, "value", _typed(v))
    hosts = ET.SubElement(meta, "hosts")
    for host in prior.hosts:
        ET.SubElement(hosts, "host", _attrs(**asdict(host)))
    # the authoritative definition (plugins, options, metadata) for an exact re-import
    ET.SubElement(meta, "definition", {"encoding": "json"}).text = json.dumps(d, sort_keys=True)
    data = ET.SubElement(root, "data")
    for t in prior.trials:
        trial = ET.SubElement(data, "trial", _attrs(
            id=t.id, candidate=t.candidate, status=t.status.value, client=t.client,
            time=t.reported_at, leased=t.leased_at, time_iso=_iso(t.reported_at)
            if t.reported_at is not None else None))
        point = ET.SubElement(trial, "point")
        for name, v in t.point.items():
            ET.SubElement(point, "param", {"name": name, **_typed(v)})
        if t.value is not None:
            ET.SubElement(trial, "performance", {"value": repr(float(t.value))})
        if t.failure is not None:
            ET.SubElement(trial, "failure", {"reason": t.failure})
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def from_xml(text: str | bytes, *, source: str = "XML document") -> PriorSession:
    """Read a document written by :func:`to_xml`."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ConfigError(f"{source}: malformed XML: {exc}") from None
    if root.tag != _XML_ROOT:
        raise ConfigError(f"{source}: the root element must be <{_XML_ROOT}>, got <{root.tag}>")
    _check_version(root.get("format", ""), source)
    meta = _child(root, "metadata", source)
    definition = _json(_child(meta, "definition", source).text or "", f"{source}, <definition>")
    started = meta.find("started")
    created = _float_or_none(started.get("time") if started is not None else None, source)
    hosts = [_host({k.replace("-", "_"): v for k, v in h.attrib.items()}, f"{source}, <host>",
                   from_text_attrs=True)
             for h in meta.iterfind("hosts/host")]
    trials = []
    for element in _child(root, "data", source).iterfind("trial"):
        where = f"{source}, trial {element.get('id')!r}"
        performance = element.find("performance")
        failure = element.find("failure")
        point = {p.get("name", ""): _untyped(p, where) for p in element.iterfind("point/param")}
        try:
            trials.append(TrialRecord(
                id=int(element.get("id", "")), candidate=int(element.get("candidate", "")),
                point=point, client=element.get("client"),
                status=TrialStatus.parse(element.get("status", "")),
                value=float(performance.get("value", "")) if performance is not None else None,
                failure=failure.get("reason") if failure is not None else None,
                leased_at=_float_or_none(element.get("leased"), where),
                reported_at=_float_or_none(element.get("time"), where)))
        except (ValueError, HarmonyError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    names = [p.get("name") for p in meta.iterfind("parameters/parameter")]
    declared = [p["name"] for p in definition.get("parameters", [])]
    if names != declared:
        raise ConfigError(f"{source}: <parameters> lists {names} but the definition declares "
                          f"{declared}")
    return PriorSession(name=root.get("name", definition.get("name", "")), definition=definition,
                        created=created, trials=trials, hosts=hosts,
                        status=SessionStatus.parse(root.get("status", "closed")))


# ---------------------------------------------------------------------------------------
# CSV

_CSV_FIXED = ("trial", "candidate", "client", "status", "value", "failure", "leased_at",
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
    buf.write(f"# started: {_iso(prior.created)}\n")
    buf.write(f"# definition: {json.dumps(prior.definition, sort_keys=True)}\n")
    for host in prior.hosts:
        buf.write(f"# host: {json.dumps(asdict(host))}\n")
    params = prior.parameter_names
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*_CSV_FIXED, *params])
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
    _check_version(lines[0].strip().rsplit(" ", 1)[-1], source)
    for number, line in enumerate(lines, start=1):
        if not line.startswith("#"):
            body_start = number - 1
            break
        key, _, raw = line[1:].strip().partition(": ")
        where = f"{source}, line {number}"
        if key in ("session", "status", "created", "definition"):
            header[key] = _json(raw, where)
        elif key == "host":
            hosts.append(_host(_json(raw, where), where))
    else:
        body_start = len(lines)
    if "definition" not in header:
        raise ConfigError(f"{source}: the '# definition:' line is missing")
    definition = header["definition"]
    types = _parameter_types(definition, source)
    reader = csv.reader(io.StringIO("".join(lines[body_start:])))
    columns = next(reader, None)
    if columns is None or tuple(columns[:len(_CSV_FIXED)]) != _CSV_FIXED:
        raise ConfigError(f"{source}: the header row must start with {list(_CSV_FIXED)}, got "
                          f"{columns}")
    params = columns[len(_CSV_FIXED):]
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


# ---------------------------------------------------------------------------------------
# files


def dumps(prior: PriorSession, fmt: str) -> str:
    """``prior`` in format ``fmt`` (``xml``, ``csv`` or ``text``)."""
    writers = {"xml": to_xml, "csv": to_csv, "text": to_text}
    if fmt not in writers:
        raise ConfigError(f"export format must be one of {sorted(writers)}, got {fmt!r}")
    return writers[fmt](prior)


def loads(text: str, fmt: str | None = None, *, source: str = "prior data") -> PriorSession:
    """Parse prior data; ``fmt`` None detects it from the content."""
    fmt = fmt or detect_format(text, source=source)
    readers = {"xml": from_xml, "csv": from_csv, "text": from_text}
    if fmt not in readers:
        raise ConfigError(f"import format must be one of {sorted(readers)}, got {fmt!r}")
    return readers[fmt](text, source=source)


def detect_format(text: str, *, source: str = "prior data") -> str:
    """``xml``, ``csv`` or ``text``, from the first lines of ``text``."""
    head = text.lstrip()[:4096]
    if head.startswith("<"):
        return "xml"
    if head.startswith("# harmony prior data"):
        for line in head.splitlines():
            if not line.startswith("#"):
                return "csv" if line.startswith(_CSV_FIXED[0] + ",") else "text"
        return "text"
    raise ConfigError(f"{source}: not harmony prior data (expected an XML document or a file "
                      f"starting with '# harmony prior data')")


def dump(prior: PriorSession, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``prior`` to ``path``; the format comes from the extension when ``fmt`` is None."""
    p = Path(path)
    fmt = fmt or format_for_path(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps(prior, fmt), encoding="utf-8")
    logger.info("wrote %d trials of session %s to %s (%s)", len(prior.trials), prior.name, p, fmt)
    return p


def load(path: str | Path, fmt: str | None = None) -> PriorSession:
    """Read prior data from ``path`` (format from ``fmt``, else detected from the content)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read prior data {p}: {exc}") from None
    return loads(text, fmt, source=str(p))


def format_for_path(path: Path) -> str:
    """The format named by a file's extension (``.xml``, ``.csv``, ``.log``/``.txt``)."""
    suffix = path.suffix.lower()
    for fmt, ext in FORMATS.items():
        if suffix == ext:
            return fmt
    if suffix == ".txt":
        return "text"
    raise ConfigError(f"{path}: cannot tell the format from the extension {suffix!r}; use "
                      f".xml, .csv or .log (or pass the format)")


# ---------------------------------------------------------------------------------------
# helpers


def _iso(t: float | None) -> str:
    return "" if t is None else datetime.fromtimestamp(t, UTC).isoformat()


def _json(raw: str, where: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{where}: malformed JSON: {exc}") from None


def _check_version(raw: str, source: str) -> None:
    if raw.strip() != str(FORMAT_VERSION):
        raise ConfigError(f"{source}: prior-data format {raw!r} is not supported; this harmony "
                          f"reads format {FORMAT_VERSION}")


def _trial(row: Mapping[str, Any], where: str) -> TrialRecord:
    try:
        return TrialRecord.from_dict(row, where=where)
    except HarmonyError as exc:
        raise ConfigError(str(exc)) from None


def _host(data: Any, where: str, *, from_text_attrs: bool = False) -> HostInfo:
    if not isinstance(data, Mapping) or "client_id" not in data:
        raise ConfigError(f"{where}: a host needs at least a client_id, got {data!r}")
    names = {f.name for f in fields(HostInfo)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown host fields {unknown}")
    values = dict(data)
    if from_text_attrs:
        for key in ("joined", "left"):
            values[key] = _float_or_none(values.get(key), where)
        for key in ("cpu_count", "ram_bytes"):
            values[key] = int(values[key]) if values.get(key) is not None else None
    return HostInfo(**values)


def _attrs(**values: object) -> dict[str, str]:
    """XML attributes: None left out, floats as repr, underscores as dashes."""
    out = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(value)
        else:
            text = str(value)
        out[key.replace("_", "-")] = text
    return out


def _typed(v: Value) -> dict[str, str]:
    if isinstance(v, bool):
        return {"type": "bool", "value": "true" if v else "false"}
    if isinstance(v, int):
        return {"type": "int", "value": str(v)}
    if isinstance(v, float):
        return {"type": "float", "value": repr(v)}
    return {"type": "str", "value": str(v)}


def _untyped(element: ET.Element, where: str) -> Value:
    kind, raw = element.get("type", "str"), element.get("value", "")
    try:
        if kind == "bool":
            return raw == "true"
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise ConfigError(f"{where}: value {raw!r} is not a {kind}") from None
    return raw


def _float_or_none(raw: str | None, where: str) -> float | None:
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{where}: {raw!r} is not a number") from None


def _child(element: ET.Element, tag: str, source: str) -> ET.Element:
    found = element.find(tag)
    if found is None:
        raise ConfigError(f"{source}: <{element.tag}> has no <{tag}> element")
    return found


def _cell(v: Value | None) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _parameter_types(definition: Mapping[str, Any], source: str) -> dict[str, Param]:
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


def prior_from_core(core: SessionCore, *, created: float | None = None,
                    hosts: Iterable[HostInfo] = ()) -> PriorSession:
    """A :class:`~harmony.core.session.SessionCore` (standalone mode) as prior data (no
    times)."""
    return PriorSession(name=core.name, definition=core.definition.to_dict(), created=created,
                        trials=core.trials(),
                        hosts=list(hosts), status=core.status)

