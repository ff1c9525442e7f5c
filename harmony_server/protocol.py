"""The wire protocol: request body schemas, error kinds and their HTTP status codes.

Every request body is a JSON object validated here (unknown keys rejected); every error is
answered as ``{"error": kind, "message": text}``. The client maps the kinds back to the
project's exceptions without importing this module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jsonschema

from harmony_base.errors import (
    ClientExistsError,
    ClientNotFoundError,
    ConfigError,
    ConflictError,
    ConstraintError,
    ForbiddenError,
    LeaseLostError,
    ProtocolError,
    SessionBrokenError,
    SessionExistsError,
    SessionNotFoundError,
    TrialError,
    UnavailableError,
    UnsupportedMediaError,
)
from harmony_base.jsontypes import JSON, JSONObject
from harmony_core.leased import finite_or_failure

__all__ = ["ConflictError", "LeaseLostError", "REQUEST_SCHEMAS", "SessionBrokenError",
           "SessionExistsError", "UnavailableError", "UnsupportedMediaError",
           "check_definition_size", "check_json_values", "error_kind", "finite_or_failure",
           "validate_request"]

#: the limits every request is held to (stated in the OpenAPI document and the README)
MAX_WAIT = 3600.0  # seconds a fetch may ask to wait (the server caps it at --max-wait)
MAX_DEPTH = 32  # nesting levels of a request body (objects and arrays)
MAX_NODES = 20_000  # values (scalars, lists, mappings) in one request body
MAX_PARAMETERS = 256  # parameters of a session definition
MAX_CONSTRAINTS = 256  # constraints of a session definition
MAX_CONSTRAINT_CHARS = 2_000  # characters of one constraint
MAX_ENUM_VALUES = 1_000  # values of one enumerated parameter


#: error kind and HTTP status for each exception class (first match wins)
ERROR_STATUS: tuple[tuple[type[BaseException], str, int], ...] = (
    (SessionBrokenError, "session_broken", 500),
    (SessionExistsError, "session_exists", 409),
    (LeaseLostError, "lease_lost", 409),
    (ClientExistsError, "client_exists", 409),
    (ConflictError, "conflict", 409),
    (ForbiddenError, "forbidden", 403),
    (UnavailableError, "unavailable", 503),
    (SessionNotFoundError, "session_not_found", 404),
    (TrialError, "trial_not_found", 404),
    (ClientNotFoundError, "client_not_found", 404),
    (ConfigError, "invalid_definition", 400),
    (ConstraintError, "invalid_definition", 400),
    (UnsupportedMediaError, "unsupported_media_type", 415),
    (ProtocolError, "bad_request", 400),
)


def error_kind(exc: BaseException) -> tuple[str, int]:
    """The ``(kind, http_status)`` of an exception raised while serving a request."""
    for cls, kind, status in ERROR_STATUS:
        if isinstance(exc, cls):
            return kind, status
    return "internal", 500


#: a string that names something (a client, a request, a host) holds no control character
#: (a newline in a client id would forge log lines); said as "not this pattern" because
#: Python's ``$`` also matches before a final newline
NO_CONTROL = {"pattern": "[\\x00-\\x1f\\x7f-\\x9f]"}
_CLIENT_ID = {"type": "string", "minLength": 1, "maxLength": 200, "not": NO_CONTROL}
_REQUEST_ID = {"type": "string", "minLength": 1, "maxLength": 100, "not": NO_CONTROL}
#: integers the store keeps must fit its 64-bit INTEGER columns
MAX_INT64 = 2**63 - 1
_TRIAL_ID = {"type": "integer", "minimum": 0, "maximum": MAX_INT64}
_HOST = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "hostname": {"type": "string", "maxLength": 255, "not": NO_CONTROL},
        "cpu_count": {"type": ["integer", "null"], "minimum": 0, "maximum": 1_000_000},
        "ram_bytes": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_INT64},
        "os": {"type": "string", "maxLength": 255},
        "python": {"type": "string", "maxLength": 64},
    },
}
_WAIT = {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0,
         "description": f"seconds to hold the request for a trial (at most {MAX_WAIT:g}; the "
                        f"server answers after at most its --max-wait, 60 s by default)"}
_POINT = {"type": "object", "additionalProperties": {"type": ["integer", "number", "string",
                                                               "boolean"]}}


def _body(properties: dict[str, Any], required: list[str] | None = None) -> JSONObject:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": required or []}


#: request body schemas by operation (the OpenAPI document reuses them)
REQUEST_SCHEMAS: dict[str, dict[str, Any]] = {
    "create": _body({"definition": {"type": "object"}, "exist_ok": {"type": "boolean"}},
                    ["definition"]),
    "join": _body({"client": _CLIENT_ID, "host": _HOST}, ["client"]),
    "fetch": _body({"client": _CLIENT_ID, "wait": _WAIT, "request": _REQUEST_ID}, ["client"]),
    "report": {
        **_body({"client": _CLIENT_ID, "trial_id": _TRIAL_ID, "value": {"type": "number"},
                 "failure": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 4000},
                 # piggybacked fetch: answer with the next trial for the same client
                 "next": _body({"wait": _WAIT, "request": _REQUEST_ID})},
                ["client", "trial_id"]),
        "oneOf": [
            {"required": ["value"], "not": {"required": ["failure"]}},
            {"required": ["value", "failure"], "properties": {"failure": {"const": False}}},
            {"required": ["failure"], "properties": {"failure": {"const": True}},
             "not": {"required": ["value"]}},
        ],
    },
    "heartbeat": _body({"client": _CLIENT_ID, "trial_id": _TRIAL_ID}, ["client", "trial_id"]),
    "restart": _body({"point": {"oneOf": [_POINT, {"type": "null"}]}}),
    "leave": _body({"client": _CLIENT_ID}, ["client"]),
    "empty": _body({}),
}

_VALIDATORS = {name: jsonschema.Draft202012Validator(schema)
               for name, schema in REQUEST_SCHEMAS.items()}


def _is_name(value: Any, longest: int) -> bool:
    # isprintable() is stricter than NO_CONTROL (and refuses lone surrogates): what it
    # refuses goes the slow way
    return isinstance(value, str) and 0 < len(value) <= longest and value.isprintable()


def _is_utf8(text: str) -> bool:
    """Whether ``text`` can be stored (encoded as UTF-8: no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_wait(value: Any) -> bool:
    return _is_number(value) and 0 <= value <= MAX_WAIT  # False for NaN


def _fast_accept(operation: str, body: Mapping[str, JSON]) -> bool:
    """True for the usual shapes of the hot requests, which then skip the schema validator
    and :func:`check_json_values`.

    Never more permissive than :data:`REQUEST_SCHEMAS` and :func:`check_json_values` (a test
    checks this); anything it does not recognise goes through full validation, which also
    words the error.
    """
    if operation == "fetch":
        return (body.keys() <= {"client", "wait", "request"}
                and _is_name(body.get("client"), 200)
                and ("wait" not in body or _is_wait(body["wait"]))
                and ("request" not in body or _is_name(body["request"], 100)))
    if operation == "report":
        trial_id = body.get("trial_id")
        if not (isinstance(trial_id, int) and not isinstance(trial_id, bool)
                and 0 <= trial_id <= MAX_INT64):
            return False
        if not _is_name(body.get("client"), 200):
            return False
        if "next" in body:
            nxt = body["next"]
            if not (isinstance(nxt, dict) and nxt.keys() <= {"wait", "request"}
                    and ("wait" not in nxt or _is_wait(nxt["wait"]))
                    and ("request" not in nxt or _is_name(nxt["request"], 100))):
                return False
        keys = body.keys() - {"client", "trial_id", "next"}
        if keys == {"value"}:
            return _is_number(body["value"])
        if keys <= {"failure", "reason"} and body.get("failure") is True:
            return "reason" not in body or (isinstance(body["reason"], str)
                                            and len(body["reason"]) <= 4000
                                            and _is_utf8(body["reason"]))
    return False


#: where a request may carry NaN or an infinity: a report's measurement (it becomes a failure)
_NON_FINITE_ALLOWED = {("report", ("value",))}


def _check_text(operation: str, where: str, text: str) -> None:
    """:class:`ProtocolError` unless ``text`` can be encoded as UTF-8 (the store's encoding).

    JSON may carry a lone surrogate (``"\\ud800"``) that no store can write: refused here,
    before any session sees it, so a command never half-happens.
    """
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ProtocolError(
            f"{operation}: {where}: the text is not valid UTF-8 (character {exc.start} is a "
            f"lone surrogate {text[exc.start]!r}); send well-formed Unicode text") from None


def check_json_values(operation: str, body: object) -> None:
    """:class:`ProtocolError` for a body nested deeper than :data:`MAX_DEPTH`, holding a
    non-finite number where one is not allowed, a string (or key) that is not UTF-8 text,
    or a value JSON cannot carry."""
    stack: list[tuple[tuple[object, ...], object]] = [((), body)]
    nodes = 0
    while stack:
        path, value = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ProtocolError(f"{operation}: the request body holds more than {MAX_NODES} "
                                f"values (strings, numbers, lists, mappings); send a smaller one")
        where = ".".join(map(str, path)) or "(body)"
        if len(path) > MAX_DEPTH:
            raise ProtocolError(f"{operation}: the request body is nested deeper than "
                                f"{MAX_DEPTH} levels (at {where})")
        if isinstance(value, dict | list) and len(value) > MAX_NODES:
            raise ProtocolError(f"{operation}: {where} holds {len(value)} entries; a request "
                                f"body may hold at most {MAX_NODES} values")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ProtocolError(f"{operation}: {where}: keys must be strings, "
                                        f"got {key!r}")
                _check_text(operation, f"{where} (a key)", key)
                stack.append((path + (key,), item))
        elif isinstance(value, list):
            stack.extend((path + (i,), item) for i, item in enumerate(value))
        elif isinstance(value, float):
            if not math.isfinite(value) and (operation, path) not in _NON_FINITE_ALLOWED:
                raise ProtocolError(f"{operation}: {where} must be a finite number, got "
                                    f"{value!r} (NaN and infinities are not accepted here)")
        elif isinstance(value, str):
            _check_text(operation, where, value)
        elif not (value is None or isinstance(value, int)):  # bool is an int
            raise ProtocolError(f"{operation}: {where}: {type(value).__name__} values are not "
                                f"accepted; use strings, numbers, booleans, null, lists and "
                                f"mappings")


def _over(what: str, limit: int, given: int) -> ProtocolError:
    return ProtocolError(f"create: {what}: at most {limit} accepted, {given} given")


def check_definition_size(definition: Mapping[str, JSON]) -> None:
    """:class:`ProtocolError` for a session definition larger than the server builds in
    bounded time: too many parameters, constraints or enumeration values, or a long constraint.
    """
    parameters = definition.get("parameters")
    if isinstance(parameters, list):
        if len(parameters) > MAX_PARAMETERS:
            raise _over("definition.parameters", MAX_PARAMETERS, len(parameters))
        for i, param in enumerate(parameters):
            values = param.get("values") if isinstance(param, Mapping) else None
            if isinstance(values, list) and len(values) > MAX_ENUM_VALUES:
                raise _over(f"definition.parameters.{i}.values", MAX_ENUM_VALUES, len(values))
    lists: list[tuple[str, object]] = [("definition.constraints", definition.get("constraints"))]
    plugins = definition.get("plugins")
    for i, plugin in enumerate(plugins if isinstance(plugins, list) else []):
        options = plugin.get("options") if isinstance(plugin, Mapping) else None
        if isinstance(options, Mapping):
            lists.append((f"definition.plugins.{i}.options.constraints",
                          options.get("constraints")))
    for where, constraints in lists:
        if not isinstance(constraints, list):
            continue
        if len(constraints) > MAX_CONSTRAINTS:
            raise _over(where, MAX_CONSTRAINTS, len(constraints))
        for j, text in enumerate(constraints):
            if isinstance(text, str) and len(text) > MAX_CONSTRAINT_CHARS:
                raise ProtocolError(f"create: {where}.{j}: a constraint may have at most "
                                    f"{MAX_CONSTRAINT_CHARS} characters, {len(text)} given")


def validate_request(operation: str, body: object) -> JSONObject:
    """Check a decoded request body against its schema; :class:`ProtocolError` names the key."""
    if isinstance(body, dict) and _fast_accept(operation, body):
        return body  # the usual fetch and report: every check below would pass
    check_json_values(operation, body)
    if not isinstance(body, Mapping):
        raise ProtocolError(f"{operation}: the request body must be a JSON object, "
                            f"got {type(body).__name__}")
    # an unknown key is named before the required key it may be a misspelling of
    errors = sorted(_VALIDATORS[operation].iter_errors(body),
                    key=lambda e: (len(e.path), e.validator != "additionalProperties"))
    if errors:
        err = errors[0]
        key = ".".join(str(p) for p in err.path) or "(body)"
        if err.validator == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            extra = sorted(set(err.instance) - set(allowed))
            raise ProtocolError(f"{operation}: unknown key {extra[0]!r} in {key}; "
                                f"allowed keys: {allowed}")
        if err.validator == "not" and err.validator_value == NO_CONTROL:
            raise ProtocolError(f"{operation}: {key} must be printable text (no control "
                                f"characters), got {err.instance!r}")
        if err.validator == "oneOf" and operation == "report":
            raise ProtocolError("report: give either 'value' (a number) or 'failure': true "
                                "with a 'reason', not both and not neither")
        raise ProtocolError(f"{operation}: {key}: {err.message}")
    if operation == "create":
        check_definition_size(body["definition"])
    return dict(body)
