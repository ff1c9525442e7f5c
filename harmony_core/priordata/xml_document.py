"""One XML document per session: ``<metadata>`` (definition, parameters, hosts, times) and
``<data>`` (one ``<trial>`` each), values typed so a reader rebuilds them exactly."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime

from harmony_base.errors import ConfigError, HarmonyError
from harmony_base.space import Value
from harmony_base.trial import SessionStatus, TrialRecord, TrialStatus
from harmony_base.version import __version__
from harmony_core.priordata.fields import (
    FORMAT_VERSION,
    check_version,
    float_or_none,
    iso,
    read_host,
    read_json,
)
from harmony_core.priordata.model import PriorSession

_XML_ROOT = "harmony-session"


def to_xml(prior: PriorSession) -> str:
    """One XML document: ``<metadata>`` (definition, parameters, hosts, times), ``<data>``."""
    root = ET.Element(_XML_ROOT, {"name": prior.name, "format": str(FORMAT_VERSION),
                                  "status": prior.status})
    meta = ET.SubElement(root, "metadata")
    started = ET.SubElement(meta, "started", _attrs(time=prior.created))
    started.text = iso(prior.created)
    ET.SubElement(meta, "exported", {"by": f"harmony {__version__}"}).text = iso(
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
            time=t.reported_at, leased=t.leased_at, time_iso=iso(t.reported_at)
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
    check_version(root.get("format", ""), source)
    meta = _child(root, "metadata", source)
    definition = read_json(_child(meta, "definition", source).text or "", f"{source}, <definition>")
    started = meta.find("started")
    created = float_or_none(started.get("time") if started is not None else None, source)
    hosts = [read_host({k.replace("-", "_"): v for k, v in h.attrib.items()}, f"{source}, <host>",
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
                leased_at=float_or_none(element.get("leased"), where),
                reported_at=float_or_none(element.get("time"), where)))
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


def _child(element: ET.Element, tag: str, source: str) -> ET.Element:
    found = element.find(tag)
    if found is None:
        raise ConfigError(f"{source}: <{element.tag}> has no <{tag}> element")
    return found
