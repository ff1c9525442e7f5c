"""The same store and server on a real PostgreSQL (``--store postgresql://...``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict
from server_support import definition, running_server, sphere

from harmony_server.store import Store
from tuner_client.api.client import connect

pytestmark = pytest.mark.postgres


def _url(dsn: str) -> str:
    d = conninfo_to_dict(dsn)
    return f"postgresql://{d['user']}@{d['host']}:{d['port']}/{d['dbname']}"


def test_sessions_survive_a_restart_on_a_postgresql_store(fresh_dsn: str, tmp_path: Path) -> None:
    url = _url(fresh_dsn)
    with running_server(tmp_path, store_url=url) as server, connect(server.url) as client:
        s = client.create_session(definition("pg", strategy="pro", dims=3, seed=3))
        values = []
        for _ in range(15):
            got = s.fetch(timeout=1)
            assert got is not None
            values.append(sphere(got.point))
            s.report(got.trial_id, values[-1])
        held = s.fetch(timeout=1)
        assert held is not None
        before = s.trials()
        me, secret = client.client_id, s.secret
    # the same client comes back after the restart (proving it with the secret its first
    # join was given): the held trial is still its own (only
    # the client holding a trial's lease may report it)
    with running_server(tmp_path, store_url=url) as server, \
            connect(server.url, client_id=me) as client:
        s = client.join("pg", secret=secret)
        def strip(trials: list[dict[str, object]]) -> list[dict[str, object]]:
            return [{k: v for k, v in t.items() if k != "lease_remaining"} for t in trials]

        assert strip(s.trials()) == strip(before)  # identical history after the restart
        assert s.best() is not None and s.best()[1] == min(values)  # type: ignore[index]
        s.report(held.trial_id, 1.0)
        assert s.status()["counts"]["done"] == 16
    store = Store(url)
    assert store.engine.dialect.name == "postgresql"
    assert sum(1 for c in store.commands("pg") if c.kind == "report") == 16
    assert len(store.trials("pg")) == 16 and store.check_integrity() == []
    store.close()
