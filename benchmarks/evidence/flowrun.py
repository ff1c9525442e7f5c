"""Running one tuning flow on a shared small cluster and keeping a timeline of what it did.

Used by the ``shift`` and ``tight`` benchmarks: every evaluation and every decision of the
:class:`tuner_client.flows.Tuner` gets a timestamp (seconds since the run started), and the
tuner's own final default-vs-best rounds give the outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tuner_client.api.client import connect
from tuner_client.config import tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.measurer import Workload
from tuner_client.servers.target import Target, open_target


def small_config(name: str, *, flow: str, mix: str | None = None, schedule: str | None = None,
                 scale: float = 0.1, online_budget: str | None = None, offline_evals: int = 2,
                 online_evals: int = 6, queries: int = 12, warmup_s: float = 2.0,
                 monitor: int = 6, max_passes: int = 2, final_rounds: int = 2,
                 seed: int = 1, local_minimum: bool = True) -> dict[str, Any]:
    """A short tuner config (SF ``scale``, RAM declared as 1GB) for the flow benchmarks."""
    tpch: dict[str, Any] = {"scale": scale}
    if schedule is not None:
        tpch["schedule"] = schedule
    else:
        tpch["mix"] = mix
    budget: dict[str, Any] = {"ram": "1GB", "os_reserved": "128MB", "connections": "auto"}
    if online_budget is not None:
        budget["online"] = online_budget
    flow_cfg: dict[str, Any] = {"kind": flow}
    if flow == "multi-pass":
        flow_cfg.update({"max_passes": max_passes, "shift": {"outside": 3, "monitor": monitor},
                         "local_minimum": {"enabled": local_minimum, "threshold": 0.1}})
    return {
        "name": name, "seed": seed,
        "database": {"restart_timeout_s": 120},
        "workload": {"tpch": tpch, "statement_timeout_s": 120},
        "measure": {"warmup_s": warmup_s, "samples": 3, "aggregate": "median",
                    "queries": queries},
        "budget": budget,
        "offline": {"knobs": {"shared_buffers": {"min": "16MB", "max": "384MB", "step": "8MB"}},
                    "strategy": {"name": "nelder-mead", "options": {"simplex_size": 2}},
                    "evaluations": offline_evals, "prior": {"enabled": False}},
        "online": {"knobs": {
            "work_mem": {"min": "1MB", "max": "64MB", "step": "1MB"},
            "maintenance_work_mem": {"min": "1MB", "max": "64MB", "step": "1MB"},
            "effective_cache_size": {"min": "64MB", "max": "1GB", "step": "8MB"},
            "random_page_cost": {"min": 0.5, "max": 10, "step": 0.1},
            "temp_buffers": {"min": "1MB", "max": "64MB", "step": "1MB"}},
            "strategy": {"name": "nelder-mead", "options": {"simplex_size": 6}},
            "evaluations": online_evals},
        "flow": flow_cfg,
        "final": {"rounds": final_rounds, "candidates": 2},
    }


def open_small_target(state_dir: Path, scale: float = 0.1) -> Target:
    """The flow benchmarks' cluster (no cgroup): TPC-H ``scale`` loaded once, then reused."""
    cfg = tuner_config_from_dict(small_config("evidence-small", flow="one-pass", mix="1Q6",
                                              scale=scale))
    return open_target(cfg, state_dir)


def run_flow(config: Mapping[str, Any], target: Target, *,
             on_record: Callable[[int], None] | None = None,
             on_decision: Callable[[str], None] | None = None,
             workload: Workload | None = None) -> dict[str, Any]:
    """Run the flow; return the outcome with a timeline of evaluations and decisions.

    ``on_record(n)`` is called after the n-th session evaluation, ``on_decision(text)`` after
    each decision of the flow (the shift benchmark switches the mix from them).
    """
    cfg = tuner_config_from_dict(dict(config))
    started = time.monotonic()
    started_epoch = time.time()
    timeline: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    def record(r: Any) -> None:
        timeline.append({"t": time.monotonic() - started, "session": r.session, "qpm": r.value,
                         "settings": dict(r.settings), "failure": r.failure,
                         "restart_s": r.restart_s})
        if on_record is not None:
            on_record(len(timeline))

    def decide(text: str) -> None:
        decisions.append({"t": time.monotonic() - started, "text": text})
        if on_decision is not None:
            on_decision(text)

    tuner = Tuner(cfg, target=target, client=connect(None), workload=workload,
                  on_record=record, on_decision=decide)
    result = tuner.run()
    summary = result.to_dict()
    # monitoring and final measurements are appended to records without on_record
    for r in tuner.records:
        if r.session.endswith("-monitor") or r.session.startswith("final"):
            timeline.append({"t": r.started - started_epoch,
                             "session": r.session, "qpm": r.value, "settings": dict(r.settings),
                             "failure": r.failure, "restart_s": r.restart_s})
    timeline.sort(key=lambda e: e["t"])
    out = result.to_dict()
    out.update({"wall_s": time.monotonic() - started, "timeline": timeline,
                "timed_decisions": decisions,
                "tuned_over_default": (summary["best_qpm"] / summary["default_qpm"]
                                       if summary["best_qpm"] and summary["default_qpm"]
                                       else None)})
    return out
