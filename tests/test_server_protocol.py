"""The wire protocol's request validation: the fast path never accepts what the schema refuses."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_base.errors import ProtocolError
from harmony_server.protocol import (
    REQUEST_SCHEMAS,
    _fast_accept,
    check_json_values,
    validate_request,
)

_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2),
                    st.sampled_from([1.0, 0.0, 3601.0, float("inf"), float("nan")]),
                    st.text(max_size=3), st.sampled_from(["\udfff", "a\ud800", "é"]),
                    st.sampled_from(["x" * 101, "x" * 201, "x" * 4001]),
                    st.lists(st.integers(), max_size=1), st.dictionaries(st.text(max_size=1),
                                                                         st.integers(), max_size=1))
_keys = st.sampled_from(["client", "wait", "request", "trial_id", "value", "failure", "reason",
                         "extra"])


@settings(max_examples=300, deadline=None)
@given(operation=st.sampled_from(["fetch", "report"]),
       body=st.dictionaries(_keys, _values, max_size=5))
def test_fast_path_accepts_only_what_the_schema_accepts(operation: str,
                                                        body: dict[str, Any]) -> None:
    if _fast_accept(operation, body):
        jsonschema.validate(body, REQUEST_SCHEMAS[operation])
        check_json_values(operation, body)  # the other checks the fast path skips


@pytest.mark.parametrize(("operation", "body"), [
    ("fetch", {"client": "c"}),
    ("fetch", {"client": "c", "wait": 2.5, "request": "r1"}),
    ("report", {"client": "c", "trial_id": 3, "value": 1.5}),
    ("report", {"client": "c", "trial_id": 0, "failure": True, "reason": "down"}),
])
def test_the_usual_bodies_take_the_fast_path(operation: str, body: dict[str, Any]) -> None:
    assert _fast_accept(operation, body)
    assert validate_request(operation, body) == body


@pytest.mark.parametrize(("operation", "body", "message"), [
    ("fetch", {"client": "c", "wait": -1}, "wait"),
    ("fetch", {"client": ""}, "client"),
    ("report", {"client": "c", "trial_id": 1, "value": True}, "value"),
    ("report", {"client": "c", "trial_id": 1, "failure": False}, "either"),
    ("report", {"client": "c", "trial_id": -1, "value": 1.0}, "trial_id"),
    ("report", {"trial_id": 1, "value": 1.0}, "'client' is a required property"),
    ("heartbeat", {"trial_id": 1}, "'client' is a required property"),
    ("join", {"client": "c", "host": {"ram": 1}}, "unknown key 'ram'"),
    ("restart", {"point": [1, 2]}, "point"),
    ("fetch", {"client": "a\nforged log line"}, "client must be printable text"),
    ("fetch", {"client": "c", "request": "r\x00"}, "request must be printable text"),
    ("join", {"client": "c", "host": {"hostname": "h\r"}}, "host.hostname must be printable"),
    ("report", {"client": "c", "trial_id": 0, "failure": True, "reason": "\udfff"},
     "reason: the text is not valid UTF-8"),
])
def test_bad_bodies_are_refused_with_the_key_named(operation: str, body: dict[str, Any],
                                                   message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        validate_request(operation, body)


def test_integral_floats_are_accepted_as_trial_ids_by_the_slow_path() -> None:
    request = {"client": "c", "trial_id": 2.0, "value": 1.0}
    assert validate_request("report", request)["trial_id"] == 2.0
