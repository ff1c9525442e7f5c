"""The durable store on a real SQLite file: tables, one-transaction writes, versions, deletes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harmony_base.errors import ConfigError
from harmony_base.hostinfo import HostInfo
from harmony_base.trial import TrialRecord
from harmony_server.store import (
    SCHEMA_VERSION,
    CommandRecord,
    Store,
    StoreError,
    default_store_url,
    normalise_store_url,
)

DEFINITION = {"name": "s", "parameters": [{"name": "x", "type": "int", "min": 0, "max": 9}]}


def _store(tmp_path: Path) -> Store:
    return Store(default_store_url(tmp_path / "state"))


def test_writes_and_reads_back_one_session(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_session("s", DEFINITION, created=100.0)
    store.write("s", [CommandRecord(1, "join", {"client": "a"}, 101.0, "a"),
                      CommandRecord(2, "fetch", {"client": "a", "trial_id": 0}, 102.0, "a")],
                [TrialRecord(0, 0, {"x": 3}, "a", "leased", None, None, 102.0, None)],
                [HostInfo("a", 101.0, "host", 2, 1 << 30, "Linux", "3.11")])
    store.write("s", [CommandRecord(3, "report", {"trial_id": 0, "value": 1.5}, 103.0, "a")],
                [TrialRecord(0, 0, {"x": 3}, "a", "done", 1.5, None, 102.0, 103.0)])
    assert [s.name for s in store.live_sessions()] == ["s"]
    assert store.get_session("s").definition == DEFINITION  # type: ignore[union-attr]
    assert [(c.seq, c.kind) for c in store.commands("s")] == [(1, "join"), (2, "fetch"),
                                                              (3, "report")]
    assert store.commands("s")[1].payload == {"client": "a", "trial_id": 0}
    (trial,) = store.trials("s")
    assert (trial.status, trial.value, trial.reported_at) == ("done", 1.5, 103.0)
    (client,) = store.clients("s")
    assert (client.hostname, client.cpu_count, client.ram_bytes) == ("host", 2, 1 << 30)
    assert store.stats.writes == 3 and store.stats.commands == 3
    assert store.stats.write_latency.count == 3 and store.stats.write_latency.total > 0
    assert store.check_integrity() == []
    store.close()

    # a second process opening the same file sees the same data, in WAL mode
    again = _store(tmp_path)
    assert len(again.commands("s")) == 3
    mode = sqlite3.connect(tmp_path / "state" / "harmony.sqlite3").execute(
        "PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    again.close()


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.create_session("s", DEFINITION, created=1.0)
    store.write("s", [CommandRecord(1, "pause", {}, 2.0)])
    with pytest.raises(StoreError):  # seq 1 again: the whole transaction must roll back
        store.write("s", [CommandRecord(2, "resume", {}, 3.0), CommandRecord(1, "pause", {}, 3.0)],
                    [TrialRecord(0, 0, {"x": 1}, None, "leased", None, None, 3.0, None)])
    assert [c.seq for c in store.commands("s")] == [1]
    assert store.trials("s") == []
    assert store.stats.failures == 1
    with pytest.raises(StoreError):
        store.create_session("s", DEFINITION, created=4.0)  # name taken
    assert store.check_integrity() == []


def test_delete_removes_every_row_of_the_session_only(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for name in ("a", "b"):
        store.create_session(name, {**DEFINITION, "name": name}, created=1.0)
        store.write(name, [CommandRecord(1, "join", {"client": "c"}, 1.0, "c")],
                    [TrialRecord(0, 0, {"x": 1}, "c", "leased", None, None, 1.0, None)],
                    [HostInfo("c", 1.0)])
    assert store.delete_session("a") is True
    assert store.delete_session("a") is False
    assert [s.name for s in store.live_sessions()] == ["b"]
    assert store.commands("a") == [] and store.trials("a") == [] and store.clients("a") == []
    assert len(store.commands("b")) == 1 and len(store.trials("b")) == 1


def test_schema_version_is_recorded_and_a_newer_store_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.close()
    path = tmp_path / "state" / "harmony.sqlite3"
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT max(version) FROM harmony_schema_version").fetchone()[0] \
            == SCHEMA_VERSION
        conn.execute("INSERT INTO harmony_schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1}"):
        _store(tmp_path)


def test_store_urls_are_checked() -> None:
    assert normalise_store_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalise_store_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    with pytest.raises(ConfigError, match="mysql"):
        normalise_store_url("mysql://u@h/db")
