"""Warm start from a running server: priors are read over HTTP, never from its store."""

from __future__ import annotations

from pathlib import Path

import pytest
from server_support import definition, running_server, sphere

from harmony.errors import ConfigError
from harmony.priordata_sources import priors_from_server
from tuner_client.client import connect
from tuner_client.config import WarmStartConfig
from tuner_client.warm import load_priors


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
