"""The OpenAPI 3 document of the HTTP API, generated from the route table and schemas."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import harmony
from harmony.definition import SESSION_SCHEMA
from harmony_server.protocol import REQUEST_SCHEMAS

if TYPE_CHECKING:
    from harmony_server.app import Endpoint

_STATUS_TEXT = {200: "OK", 201: "Created", 400: "Bad request (malformed JSON, schema violation)",
                404: "Unknown session or trial", 409: "Conflict with the session's state",
                413: "Request body too large", 401: "Missing or wrong bearer token",
                503: "Store unavailable or session not recoverable"}

_ERROR = {
    "type": "object", "required": ["error", "message"],
    "properties": {"error": {"type": "string", "description": "machine-readable kind, e.g. "
                             "bad_request, session_not_found, trial_not_found, lease_lost, "
                             "session_exists, too_large, unauthorized, unavailable"},
                   "message": {"type": "string"}},
}

_FETCH_ANSWER = {
    "oneOf": [
        {"type": "object", "properties": {
            "status": {"const": "trial"}, "trial_id": {"type": "integer"},
            "point": {"type": "object"}, "candidate": {"type": "integer"},
            "lease_expires": {"type": "number", "description": "seconds since the epoch"}}},
        {"type": "object", "properties": {
            "status": {"const": "wait"}, "best": {"type": ["object", "null"]},
            "paused": {"type": "boolean"}, "converged": {"type": "boolean"},
            "retry_after": {"type": "number"}}},
    ]
}


def _schema_for(name: str) -> dict[str, Any]:
    schema = dict(REQUEST_SCHEMAS[name])
    if name == "create":
        schema["properties"] = {**schema["properties"],
                                "definition": {"$ref": "#/components/schemas/SessionDefinition"}}
    return schema


def openapi_document(endpoints: Iterable[Endpoint]) -> dict[str, Any]:
    """Build the OpenAPI 3.1 document for the given endpoints."""
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        op: dict[str, Any] = {"operationId": e.operation, "summary": e.summary, "responses": {}}
        if "{name}" in e.path:
            op["parameters"] = [{"name": "name", "in": "path", "required": True,
                                 "schema": {"type": "string"}, "description": "session name"}]
        if e.request is not None:
            op["requestBody"] = {"required": e.request not in ("empty", "restart"), "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{e.request}"}}}}
        for status in e.responses:
            content: dict[str, Any]
            if status >= 400:
                content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            elif e.operation == "fetch":
                content = {"application/json": {"schema": _FETCH_ANSWER}}
            elif e.operation == "metrics":
                content = {"text/plain": {"schema": {"type": "string"}}}
            else:
                content = {"application/json": {"schema": {"type": "object"}}}
            op["responses"][str(status)] = {"description": _STATUS_TEXT.get(status, ""),
                                            "content": content}
        if not e.public:
            op["responses"]["401"] = {"description": _STATUS_TEXT[401]}
            op["security"] = [{"bearer": []}, {}]
        if e.request is not None:
            op["responses"]["413"] = {"description": _STATUS_TEXT[413]}
        paths.setdefault(e.path, {})[e.method.lower()] = op
    schemas: dict[str, Any] = {name: _schema_for(name) for name in REQUEST_SCHEMAS}
    schemas["SessionDefinition"] = {k: v for k, v in SESSION_SCHEMA.items() if k != "$schema"}
    schemas["Error"] = _ERROR
    return {
        "openapi": "3.1.0",
        "info": {"title": "Harmony for PostgreSQL session server", "version": harmony.__version__,
                 "description": "Active-Harmony-style tuning sessions: clients fetch points, "
                                "measure them and report values; the server runs the search."},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
