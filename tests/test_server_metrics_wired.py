"""The server's /metrics is served by default (no extra wiring) and parses as Prometheus text."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harmony_server.server import start_server
from tuner_client.api.client import connect


def test_default_server_exports_documented_series_with_real_counts(tmp_path: Path) -> None:
    definition = {"name": "m", "parameters": [{"name": "x", "type": "int", "min": 0, "max": 9}],
                  "strategy": "exhaustive"}
    with start_server(port=0, state_dir=tmp_path) as handle:
        with connect(handle.url) as client:
            session = client.create_session(definition)
            for _ in range(4):
                got = session.fetch(timeout=5)
                assert got is not None
                session.report(got.trial_id, float(got.point["x"]))
        body = urllib.request.urlopen(handle.url + "/metrics").read().decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(body) for s in family.samples}
    handed = sum(v for (name, _), v in samples.items() if name == "harmony_trials_handed_out_total")
    reports = sum(v for (name, _), v in samples.items() if name == "harmony_reports_total")
    assert handed == 4
    assert reports == 4
