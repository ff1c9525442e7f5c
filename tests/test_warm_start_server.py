"""Warm start from a running server: priors are read over HTTP (GET /priors), never from its
store; a store URL where files belong is an error that says what to use instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_support import Raw, definition, running_server, sphere

from harmony_base.errors import ConfigError
from harmony_core.definition import SessionDefinition
from harmony_core.priordata import HostInfo, prior_from_core
from harmony_core.session import SessionCore
from harmony_server.priordata_store import import_into_store
from harmony_server.store import Store, default_store_url
from tuner_client.api.client import connect
from tuner_client.api.priordata_remote import prior_from_server, priors_from_server
from tuner_client.config import WarmStartConfig
from tuner_client.phases.warm import load_priors


def test_priors_from_a_server_carry_every_measured_trial(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        with connect(server.url) as client:
            for name, evals in (("first", 6), ("second", 4)):
                s = client.create_session(definition(name, dims=2, seed=3))
                for _ in range(evals):
                    got = s.fetch(timeout=1)
                    assert got is not None
                    s.report(got.trial_id, sphere(got.point))
        priors = load_priors(WarmStartConfig(server=server.url))
        skipped = priors_from_server(server.url, exclude=["first"])
    by_name = {p.name: p for p in priors}
    assert sorted(by_name) == ["first", "second"]
    assert len(by_name["first"].completed()) == 6 and len(by_name["second"].completed()) == 4
    best_point, best_value = by_name["first"].best()
    assert best_value == min(t.value for t in by_name["first"].completed())
    assert [p.name for p in skipped] == ["second"]


def test_unreachable_server_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="warm_start.server"):
        load_priors(WarmStartConfig(server="http://127.0.0.1:9"))


def test_imported_sessions_reach_warm_starts_over_http_only(tmp_path: Path) -> None:
    """GET /priors lists every stored session (live and imported); GET /priors/{name} serves
    one as prior data, so the tuner sees imported sessions without opening the store."""
    core = SessionCore(SessionDefinition.from_dict(definition("old", dims=2, seed=5)))
    core.join("c")
    for _ in range(7):
        got = core.fetch("c")
        assert got is not None
        core.report(got.trial_id, sphere(got.point))
    old = prior_from_core(core, created=1700000000.0,
                          hosts=[HostInfo("c", 1700000000.0, "db1", 2, 8 * 1024**3, "Linux")])
    store = Store(default_store_url(tmp_path))
    try:
        import_into_store(store, old)
    finally:
        store.close()
    with running_server(tmp_path) as server:
        with connect(server.url) as client:
            s = client.create_session(definition("live", dims=2, seed=3))
            for _ in range(3):
                got = s.fetch(timeout=1)
                assert got is not None
                s.report(got.trial_id, sphere(got.point))
        http = Raw(server.url)
        status, listed = http("GET", "/priors")
        assert status == 200
        assert [(e["name"], e["status"]) for e in listed["sessions"]] == [
            ("old", "imported"), ("live", "live")]
        assert http("GET", "/priors/nope")[0] == 404
        paths = http("GET", "/openapi.json")[1]["paths"]
        assert paths["/priors"]["get"]["operationId"] == "listPriors"
        assert paths["/priors/{name}"]["get"]["operationId"] == "getPrior"
        priors = {p.name: p for p in load_priors(WarmStartConfig(server=server.url))}
        live = prior_from_server(server.url, "live")
    assert sorted(priors) == ["live", "old"]
    back = priors["old"]
    assert back.status == "imported" and back.trials == old.trials and back.hosts == old.hosts
    assert back.best() == old.best() and len(back.completed()) == 7
    # a hosted session reports its live status, with the client that measured it
    assert live.status == "running" and len(live.completed()) == 3
    assert len(live.hosts) == 1 and live.hosts[0].cpu_count is not None


@pytest.mark.parametrize("source", ["sqlite:///state/harmony.db",
                                    "postgresql+psycopg://harmony@db/harmony",
                                    "http://127.0.0.1:1979"])
def test_a_url_in_warm_start_from_says_what_to_use_instead(source: str) -> None:
    with pytest.raises(ConfigError, match=r"warm_start.from: .* warm_start.server .*"
                                          r"harmony export"):
        load_priors(WarmStartConfig(sources=(source,)))
