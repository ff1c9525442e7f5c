"""The one trial record shared by the core, the store and prior data, and the label enums."""

from __future__ import annotations

import pytest

from harmony_base.errors import ConfigError, TrialError
from harmony_base.trial import SessionStatus, TrialRecord, TrialStatus
from harmony_core import priordata
from harmony_core.definition import SessionDefinition
from harmony_core.session import SessionCore
from tuner_client.metrics.labels import FailureKind

DEFINITION = {"name": "t", "parameters": [{"name": "x", "type": "int", "min": 0, "max": 9}],
              "strategy": "random", "seed": 1}


def test_the_core_hands_out_frozen_records_and_replaces_them_on_report() -> None:
    core = SessionCore(SessionDefinition.from_dict(DEFINITION))
    first, second = core.fetch("a"), core.fetch("a")
    assert first is not None and second is not None
    leased = core.trial(first.trial_id)
    assert leased.status is TrialStatus.LEASED and not leased.status.reported
    assert core.report(first.trial_id, 2.5) and not core.report(first.trial_id, 9.0)
    core.release(second.trial_id)
    done, released = core.trial(first.trial_id), core.trial(second.trial_id)
    assert (done.status, done.value, done.completed) == (TrialStatus.DONE, 2.5, True)
    assert leased.status is TrialStatus.LEASED  # the earlier record is left as it was
    assert released.status is TrialStatus.RELEASED
    assert core.counts() == {"leased": 0, "done": 1, "failed": 0, "released": 1,
                             "candidates": 2, "completed": 1}
    assert core.status is SessionStatus.RUNNING and core.status == "running"


def test_a_record_round_trips_through_its_json_form() -> None:
    record = TrialRecord(3, 1, {"x": 4}, "c", TrialStatus.FAILED, None, "boom", 10.5, 11.25)
    data = record.to_dict()
    assert data["status"] == "failed" and type(data["status"]) is str
    assert list(data) == ["id", "candidate", "point", "client", "status", "value", "failure",
                          "leased_at", "reported_at"]
    assert TrialRecord.from_dict(data) == record
    assert TrialRecord(3, 1, {"x": 4}, "c", "failed") == TrialRecord(3, 1, {"x": 4}, "c",
                                                                      TrialStatus.FAILED)


def test_an_unknown_status_is_an_error_that_names_the_allowed_ones() -> None:
    with pytest.raises(TrialError, match=r"one of \['leased', 'done', 'failed', 'released'\], "
                                         r"got 'finished'"):
        TrialRecord(0, 0, {"x": 1}, None, "finished")
    with pytest.raises(TrialError, match=r"trial 7: trial fields: unknown \['colour'\]"):
        TrialRecord.from_dict({"id": 1, "candidate": 1, "point": {}, "status": "done",
                               "colour": "red"}, where="trial 7")
    with pytest.raises(ConfigError, match="a session's status must be one of"):
        SessionStatus.parse("sleeping")


def test_a_bad_status_in_a_prior_data_file_names_the_line() -> None:
    core = SessionCore(SessionDefinition.from_dict(DEFINITION))
    assignment = core.fetch("a")
    assert assignment is not None
    core.report(assignment.trial_id, 1.0)
    text = priordata.to_csv(priordata.prior_from_core(core))
    broken = text.replace(",done,", ",finished,")
    with pytest.raises(ConfigError, match=r"data.csv, line \d+: .*got 'finished'"):
        priordata.from_csv(broken, source="data.csv")
    assert priordata.from_csv(text).trials == core.trials()


@pytest.mark.parametrize(("reason", "kind"), [
    ("infeasible: over the memory budget by 12MB", FailureKind.INFEASIBLE),
    ("the restart did not come back within 60 s", FailureKind.RESTART),
    ("applying work_mem failed: permission denied", FailureKind.APPLY),
    ("no samples were measured", FailureKind.MEASURE),
    ("guardrail: latency", FailureKind.OTHER),
])
def test_failure_reasons_have_one_reader(reason: str, kind: FailureKind) -> None:
    assert FailureKind.of(reason) is kind
