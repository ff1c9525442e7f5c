"""The OpenAPI 3 document of the HTTP API, generated from the route table and schemas."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from harmony_base.jsontypes import JSONObject
from harmony_base.tokens import CLIENT_SECRET_HEADER
from harmony_base.version import __version__
from harmony_core.definition import (
    MAX_BOUND,
    MAX_LEASE_SECONDS,
    MIN_LEASE_SECONDS,
    SESSION_SCHEMA,
)
from harmony_server.endpoint import Endpoint
from harmony_server.protocol import (
    MAX_CONSTRAINT_CHARS,
    MAX_CONSTRAINTS,
    MAX_DEPTH,
    MAX_ENUM_VALUES,
    MAX_NODES,
    MAX_PARAMETERS,
    MAX_WAIT,
    REQUEST_SCHEMAS,
)
from plugins.base import Plugin
from strategies.base import Strategy, load_entry_point_strategies

_STATUS_TEXT = {200: "OK", 201: "Created",
                400: "Bad request (malformed JSON or YAML, schema violation, non-finite number, "
                     "nesting too deep, text that is not UTF-8, a control character in a "
                     "name) or invalid definition (bad constraint, unknown strategy)",
                403: "Missing or wrong client secret (X-Harmony-Client-Secret) for the "
                     "body's client",
                404: "Unknown session, trial or client", 409: "Conflict with the session's "
                "state (session exists; client id already joined; lease lost or the trial held "
                "by another client, who is not named)",
                413: "Request body too large", 401: "Missing or wrong bearer token",
                415: "Request body neither application/json nor application/yaml",
                503: "Store unavailable or session not recoverable"}

_ERROR = {
    "type": "object", "required": ["error", "message"],
    "properties": {"error": {"type": "string", "description": "machine-readable kind, e.g. "
                             "bad_request, session_not_found, trial_not_found, "
                             "client_not_found, lease_lost, client_exists, session_exists, "
                             "forbidden, too_large, unauthorized, unavailable"},
                   "message": {"type": "string"}},
}

_NUM = {"type": "number"}
_BEST = {"oneOf": [{"type": "null"}, {"type": "object", "required": ["point", "value"],
                                      "properties": {"point": {"type": "object"},
                                                     "value": _NUM}}]}
_STATUS = {"enum": ["running", "paused", "converged"]}


def _obj(properties: dict[str, object], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties,
            "required": required if required is not None else sorted(properties)}


_SUMMARY = _obj({"name": {"type": "string"}, "status": _STATUS, "strategy": {"type": "string"},
                 "objective": {"type": "string"}, "goal": {"enum": ["minimize", "maximize"]},
                 "best": _BEST, "trials": {"type": "integer"}, "completed": {"type": "integer"},
                 "clients": {"type": "integer"}, "created": _NUM})
_HOST = _obj({"client_id": {"type": "string"}, "joined": _NUM,
              "hostname": {"type": ["string", "null"]}, "cpu_count": {"type": ["integer", "null"]},
              "ram_bytes": {"type": ["integer", "null"]}, "os": {"type": ["string", "null"]},
              "python": {"type": ["string", "null"]}, "left": {"type": ["number", "null"]}},
             ["client_id", "joined"])
_DESCRIBE = {**_SUMMARY, "properties": {
    **_SUMMARY["properties"], "paused": {"type": "boolean"}, "converged": {"type": "boolean"},
    "convergence_reason": {"type": ["string", "null"]},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    "leases": {"type": "integer"}, "seq": {"type": "integer"},
    "hosts": {"type": "array", "items": _HOST},
    "definition": {"$ref": "#/components/schemas/SessionDefinition"}},
    "required": sorted(_SUMMARY["properties"]) + ["counts", "definition", "hosts", "leases"]}
_TRIAL = _obj({"id": {"type": "integer"}, "candidate": {"type": "integer"},
               "point": {"type": "object"}, "client": {"type": ["string", "null"]},
               "status": {"enum": ["leased", "done", "failed", "released"]},
               "value": {"type": ["number", "null"]}, "failure": {"type": ["string", "null"]},
               "leased_at": {"type": ["number", "null"]},
               "reported_at": {"type": ["number", "null"]},
               "lease_remaining": {"type": ["number", "null"]}}, ["id", "status", "point"])
_WAIT_ANSWER = _obj({"status": {"const": "wait"}, "best": _BEST, "paused": {"type": "boolean"},
                     "converged": {"type": "boolean"}, "retry_after": _NUM})
_TRIAL_ANSWER = _obj({"status": {"const": "trial"}, "trial_id": {"type": "integer"},
                      "point": {"type": "object"}, "candidate": {"type": "integer"},
                      "lease_expires": {**_NUM, "description": "seconds since the epoch"}})
_STATUS_ANSWER = _obj({"status": _STATUS})

#: the body of each operation's 2xx answer
RESPONSE_SCHEMAS: dict[str, JSONObject] = {
    "healthz": _obj({"status": {"const": "ok"}, "sessions": {"type": "integer"},
                     "broken": {"type": "integer"}}),
    "openapi": {"type": "object", "required": ["openapi", "paths"]},
    "listSessions": _obj({"sessions": {"type": "array", "items": {"oneOf": [
        _SUMMARY, _obj({"name": {"type": "string"}, "status": {"const": "broken"},
                        "error": {"type": "string"}})]}}}),
    "createSession": _DESCRIBE,
    "getSession": _DESCRIBE,
    "killSession": _obj({"killed": {"type": "string"}}),
    "join": _obj({"session": {"type": "string"}, "client": {"type": "string"},
                  "lease_seconds": _NUM,
                  "definition": {"$ref": "#/components/schemas/SessionDefinition"},
                  "secret": {"type": "string", "description": "a new client's secret, answered "
                             "by its first join only: send it as X-Harmony-Client-Secret"}},
                 ["session", "client", "lease_seconds", "definition"]),
    "fetch": {"oneOf": [_TRIAL_ANSWER, _WAIT_ANSWER]},
    "report": _obj({"accepted": {"type": "boolean", "description": "false when the trial "
                                 "had been reported already (its first report stands)"},
                    "duplicate": {"type": "boolean", "description": "only when not accepted: "
                                  "true when this report repeats the recorded one (a retry)"},
                    "reason": {"type": "string", "description": "only when not accepted and "
                               "not a duplicate: why the report was rejected"},
                    "converged": {"type": "boolean"},
                    "next": {"oneOf": [_TRIAL_ANSWER, _WAIT_ANSWER]}},
                   ["accepted", "converged"]),
    "heartbeat": _obj({"trial_id": {"type": "integer"}, "lease_expires": _NUM}),
    "best": _obj({"best": _BEST, "converged": {"type": "boolean"}}),
    "pause": _STATUS_ANSWER,
    "resume": _STATUS_ANSWER,
    "restart": _STATUS_ANSWER,
    "leave": _obj({"released": {"type": "integer", "description": "trials handed out again"}}),
    "listTrials": _obj({"trials": {"type": "array", "items": _TRIAL}}),
    "listPriors": _obj({"sessions": {"type": "array", "items": _obj(
        {"name": {"type": "string"}, "status": {"type": "string"},
         "created": {"type": ["number", "null"]}}, ["name", "status"])}}),
    "getPrior": _obj({"format": {}, "name": {"type": "string"}, "status": {"type": "string"},
                      "created": {"type": ["number", "null"]}, "definition": {"type": "object"},
                      "hosts": {"type": "array", "items": {"type": "object"}},
                      "trials": {"type": "array", "items": _TRIAL}},
                     ["name", "status", "definition", "hosts", "trials"]),
}


def _definition_schema() -> JSONObject:
    """SESSION_SCHEMA with the registered strategy and plugin names as enums."""
    load_entry_point_strategies()
    schema = copy.deepcopy({k: v for k, v in SESSION_SCHEMA.items() if k != "$schema"})
    props = schema["properties"]
    strategy_name = {"type": "string", "enum": sorted(Strategy.registry)}
    props["strategy"]["oneOf"][0] = strategy_name
    props["strategy"]["oneOf"][1]["properties"]["name"] = strategy_name
    plugin_name = {"type": "string", "enum": sorted(Plugin.registry)}
    plugin = props["plugins"]["items"]
    plugin["oneOf"][0] = plugin_name
    plugin["oneOf"][1]["properties"]["name"] = plugin_name
    schema["description"] = (
        f"A session definition. Limits: lease_seconds {MIN_LEASE_SECONDS:g}..{MAX_LEASE_SECONDS:g}"
        f"; parameter min, max and step within ±{MAX_BOUND:g}; no NaN or infinity anywhere; "
        f"request bodies nested at most {MAX_DEPTH} levels and holding at most {MAX_NODES} "
        f"values, every string UTF-8 text; at most {MAX_PARAMETERS} parameters, "
        f"{MAX_CONSTRAINTS} constraints of at most {MAX_CONSTRAINT_CHARS} characters and "
        f"{MAX_ENUM_VALUES} values per enumeration; fetch 'wait' at most {MAX_WAIT:g} s.")
    return schema

def _schema_for(name: str) -> JSONObject:
    schema = dict(REQUEST_SCHEMAS[name])
    if name == "create":
        schema["properties"] = {**schema["properties"],
                                "definition": {"$ref": "#/components/schemas/SessionDefinition"}}
    return schema


def openapi_document(endpoints: Iterable[Endpoint]) -> dict[str, object]:
    """Build the OpenAPI 3.1 document for the given endpoints."""
    paths: dict[str, JSONObject] = {}
    for e in endpoints:
        op: dict[str, Any] = {"operationId": e.operation, "summary": e.summary, "responses": {}}
        if "{name}" in e.path:
            op["parameters"] = [{"name": "name", "in": "path", "required": True,
                                 "schema": {"type": "string"}, "description": "session name"}]
        if e.request is not None:
            ref = {"schema": {"$ref": f"#/components/schemas/{e.request}"}}
            op["requestBody"] = {"required": e.request not in ("empty", "restart"), "content": {
                "application/json": ref, "application/yaml": ref}}
        for status in e.responses:
            content: JSONObject
            if status >= 400:
                content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            elif e.operation == "metrics":
                content = {"text/plain": {"schema": {"type": "string"}}}
            elif e.operation in RESPONSE_SCHEMAS:
                content = {"application/json": {"schema": RESPONSE_SCHEMAS[e.operation]}}
            else:  # an endpoint added without its answer's schema (a test catches this)
                content = {"application/json": {"schema": {"type": "object"}}}
            op["responses"][str(status)] = {"description": _STATUS_TEXT.get(status, ""),
                                            "content": content}
        if not e.public:
            op["responses"]["401"] = {"description": _STATUS_TEXT[401]}
            # the bearer token only when the server was given one (--token-file)
            op["security"] = ([{"bearer": [], "clientSecret": []}, {"clientSecret": []}]
                              if e.client_secret else [{"bearer": []}, {}])
            # any route that reads or writes the store can find it unavailable
            op["responses"]["503"] = {"description": _STATUS_TEXT[503], "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        if e.request is not None:
            for status in (400, 413, 415):
                op["responses"].setdefault(str(status), {
                    "description": _STATUS_TEXT[status],
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}}})
        paths.setdefault(e.path, {})[e.method.lower()] = op
    schemas: dict[str, object] = {name: _schema_for(name) for name in REQUEST_SCHEMAS}
    schemas["SessionDefinition"] = _definition_schema()
    schemas["Error"] = _ERROR
    return {
        "openapi": "3.1.0",
        "info": {"title": "Harmony for PostgreSQL session server", "version": __version__,
                 "description": "Active-Harmony-style tuning sessions: clients fetch points, "
                                "measure them and report values; the server runs the search."},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {
                           "bearer": {"type": "http", "scheme": "bearer", "description":
                                      "the server's shared token (--token-file): who may use "
                                      "the API at all"},
                           "clientSecret": {"type": "apiKey", "in": "header",
                                            "name": CLIENT_SECRET_HEADER, "description":
                                            "one client's secret, issued by its join: proves "
                                            "the body's 'client' is the caller"}}},
    }
