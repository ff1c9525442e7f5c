"""The report of an offline session the BME probes steered: the probes, the fitted curve and
M* beside the session's throughput evaluations, and the probe decisions as a table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from test_priordata import make_definition, run_session
from test_report import embedded_images

from harmony_core.priordata import prior_from_core
from harmony_report import shared_buffers_throughput, write_report

MIB = 1024**2
DECISION = {"decision": "knee", "reason": "M* = 96MB (R² 0.991)", "probe_cost_s": 14.2,
            "p_star": 0.02, "p_c": 0.05, "m_b": 4.0 * MIB, "m_star": 96.0 * MIB, "r2": 0.991,
            "points": [[16 * MIB, 0.41], [40 * MIB, 0.16], [101 * MIB, 0.03],
                       [256 * MIB, 0.02]],
            "probes": [{"size": 16 * MIB, "miss": 0.41}, {"size": 40 * MIB, "miss": 0.16},
                       {"size": 101 * MIB, "miss": 0.03}, {"size": 256 * MIB, "miss": 0.02}],
            "pass": "p1-offline"}


def _throughput(point: dict[str, Any]) -> float:
    return 1000.0 - (point["shared_buffers"] - 96) ** 2 / 10.0


def test_the_bme_figure_shows_probes_curve_and_throughput(tmp_path: Path) -> None:
    definition = make_definition(
        "tpch-p1-offline-bme", params=[{"name": "shared_buffers", "type": "int", "min": 16,
                                        "max": 128, "step": 8, "unit": "MB"}],
        options={"simplex_size": 2}, metadata={"bme": DECISION, "bme_probes": [DECISION]})
    prior = prior_from_core(run_session(definition, 6, objective=_throughput, clients=("a",)),
                            created=1700000000.0)
    pairs = shared_buffers_throughput(prior)
    assert len(pairs) >= 4
    # the session's MB values are shown in bytes, beside their measured throughput
    assert all(16 * MIB <= m <= 128 * MIB and v == _throughput({"shared_buffers": m / MIB})
               for m, v in pairs)
    page = write_report(prior, tmp_path).read_text()
    assert "M* = 96.0 MiB" in page and "knee: M* = 96MB (R² 0.991)" in page
    assert "throughput evaluations" in page and "14.2 s" in page
    # the probe table: every probe with its miss probability
    assert re.search(r"16\.0 MiB: 0\.410, 40\.0 MiB: 0\.160, 101\.0 MiB: 0\.030", page)
    assert len(embedded_images(page)) == 3  # tuning curve, knobs, BME (no comparison)


def test_a_probe_decision_without_a_fit_is_still_reported(tmp_path: Path) -> None:
    flat = {"decision": "no-knee", "reason": "no knee: the miss probability is flat",
            "probe_cost_s": 9.0, "pass": "p1-offline",
            "probes": [{"size": 32 * MIB, "miss": 0.011}, {"size": 128 * MIB, "miss": 0.010}]}
    definition = make_definition("x", metadata={"bme_probes": [flat]})
    prior = prior_from_core(run_session(definition, 3, clients=("a",)), created=1700000000.0)
    page = write_report(prior, tmp_path).read_text()
    assert "no-knee: no knee: the miss probability is flat" in page
    assert "No BME fit was recorded" not in page
