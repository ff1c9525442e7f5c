"""BME probes as a shared_buffers prior, on a real memory-bound PostgreSQL: a careful sweep of
throughput by shared_buffers, repeated real probe sets (restart, a short cold-buffer window,
the miss probability from pg_statio), and replays of the offline search with and without the
probes' prior.

``--setup tpch`` runs a TPC-H mix, ``--setup lookup`` skewed key lookups on ``lineitem``, both
in a memory cgroup smaller than the TPC-H database, so buffer misses cost reads the OS cache
cannot all absorb. ``--setup tpcb`` runs pgbench TPC-B (``--pgbench-scale``, 4 clients),
loaded outside the cgroup first, then in a cgroup smaller than its tables. ``--setup keys``
runs batched primary key lookups on pgbench's
``pgbench_accounts`` (``pgbench -i -s --pgbench-scale``; uniform keys, or skewed with
``--skew``) in a cgroup large enough for the OS cache to hold the table: a buffer miss then
costs a read from the page cache plus a buffer replacement, which dominates a lookup's CPU
cost, so throughput has a knee where the table fits in shared_buffers.
``--probe-sets-per-pass 0`` measures only the sweep (a pilot: is there a knee?). ``--settle-s``
(default the tuner's ``bme.settle_s``; 0: cold windows) lets each probe's buffer settle before
its window (:mod:`tuner_client.probes.settle`). The result says, per probe set, whether its
search window holds the sweep's best size.

Sweep passes (restart, warm-up, samples at every size; alternating order) are interleaved
with probe sets, so both see the same machine. The offline session (2-vertex Nelder-Mead on
an 8 MB grid, as the tuner runs it) is then replayed on the sweep (throughput linear in log
size between sizes, the measured sample CV as noise) from several starts and seeds: plain,
and after one of the measured probe sets (decided and narrowed exactly as
:mod:`tuner_client.phases.offline` does). Counted: full evaluations and wall-clock (probes
included, at their measured cost) until a search first evaluates a size within 95 % of the
sweep's best throughput; and, under the tuner's own budgets (offline.evaluations for plain,
bme.evaluations after usable probes), the size each search keeps and the wall-clock it spends.
``--pool a.json,b.json,...`` pools earlier results with a two-level bootstrap (sweeps, then
replays).

Run: ``flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.bme_probes --setup tpch``
(or ``lookup`` / ``keys``); ``--from-json FILE`` redoes the analysis on earlier measurements.
Writes ``benchmarks/results/bme_probes_<setup>[.<tag>].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from scipy.stats import binomtest

from benchmarks.bme_prior import Table, _machine, _session, _size_text
from benchmarks.simulators.replay import point_noise_only, replay_objective
from bme.probe_decision import Probe, decide, probe_sizes, search_radius, search_window
from harmony_base.errors import HarmonyError
from harmony_base.space import IntParam, Space
from tuner_client.config import MeasureConfig
from tuner_client.config.model import OFFLINE_SESSION, ProbeConfig, default_estimator
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import Measurer, PointRecord, ServerAccess
from tuner_client.phases.offline_probes import flat_needs_a_full_buffer
from tuner_client.probes.runner import BufferFill, run_probes, touched_pages
from tuner_client.servers.controllers.local import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from workloads.base import Workload
from workloads.driver import WorkloadDriver
from workloads.loop import Statement, StatementLoop
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)

RESULTS = Path(__file__).resolve().parent / "results"
MB = 1 << 20
DBNAME = "tpch"
STEP_MB = 8
TPCH_MIX = "2Q6,2Q13,1Q9"
LOOKUP_BATCH = 50
KEYS_BATCH = 500
KEYS_PRIME = 7919
#: a reference measurement after every this many sweep sizes (its cost is what the tuner's
#: paired block adds to an offline evaluation)
REFERENCE_EVERY = 4


# ---------------------------------------------------------------------------------------------
# workloads


def lookup_workload(dsn: str, seed: int) -> StatementLoop:
    """Skewed key lookups of orders' line items: key rank n·u³ over a fixed shuffle of the
    order keys (hot keys spread over the pages), batches of 50 keys per statement."""
    with psycopg.connect(dsn) as conn:
        keys = np.array([r[0] for r in conn.execute("SELECT o_orderkey FROM orders")],
                        dtype=np.int64)
    np.random.default_rng(seed).shuffle(keys)

    def draw(rng: np.random.Generator) -> Statement:
        ranks = (keys.size * rng.random(LOOKUP_BATCH) ** 3).astype(np.int64)
        return ("SELECT sum(l_extendedprice) FROM lineitem WHERE l_orderkey = ANY(%s)",
                (keys[ranks].tolist(),))

    return StatementLoop(dsn, draw, streams=4, seed=seed)


def keys_workload(dsn: str, seed: int, skew: float) -> StatementLoop:
    """Batched primary-key lookups on pgbench_accounts: each statement looks up
    ``KEYS_BATCH`` keys drawn by the server (rank n·random()^skew, 1 = uniform, mapped
    through a fixed permutation so hot keys spread over the pages), so the client's cost per
    statement is small beside the server's buffer accesses."""
    with psycopg.connect(dsn) as conn:
        n = int(conn.execute("SELECT max(aid) FROM pgbench_accounts").fetchone()[0])  # type: ignore[index]
    if math.gcd(KEYS_PRIME, n) != 1:
        raise HarmonyError(f"keys setup: {n} accounts share a factor with {KEYS_PRIME}")
    statement = ("SELECT sum(abalance) FROM pgbench_accounts WHERE aid = ANY(ARRAY("
                 "SELECT 1 + (floor(%s * random() ^ %s)::bigint * %s) %% %s"
                 " FROM generate_series(1, %s)))")
    params = (n, skew, KEYS_PRIME, n, KEYS_BATCH)

    def draw(rng: np.random.Generator) -> Statement:
        return statement, params

    return StatementLoop(dsn, draw, streams=2, seed=seed)


def make_workload(args: argparse.Namespace, dsn: str) -> Workload:
    if args.setup == "tpcb":
        return PgbenchWorkload(dsn, scale=args.pgbench_scale, clients=4)
    if args.setup == "lookup":
        return lookup_workload(dsn, args.seed)
    if args.setup == "keys":
        return keys_workload(dsn, args.seed, args.skew)
    return WorkloadDriver(dsn, args.mix, seed=args.seed)


def load_keys(dsn: str, scale: int) -> int:
    """pgbench's tables at ``scale`` (reused when already there); the database's size."""
    PgbenchWorkload(dsn, scale=scale).start()  # initialises the tables, runs no load
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgbench_accounts")
        return int(conn.execute("SELECT pg_database_size(current_database())"
                                ).fetchone()[0])  # type: ignore[index]


def load_tpcb_unlimited(state: Path, scale: int) -> None:
    """pgbench's tables at ``scale`` loaded by the cluster outside its cgroup (a COPY and index
    build under a small limit get the backend OOM-killed), then stopped."""
    loader = LocalCluster(state / "cluster")
    if not loader.is_initialized():
        loader.init()
    loader.start()
    try:
        with psycopg.connect(loader.dsn, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                [DBNAME]).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
        load_keys(loader.dsn_for(DBNAME), scale)
    finally:
        loader.stop()


def data_text(args: argparse.Namespace) -> str:
    if args.setup in ("keys", "tpcb"):
        return f"pgbench tables at scale {args.pgbench_scale}"
    return f"TPC-H SF {args.scale}"


def mix_text(args: argparse.Namespace) -> str:
    if args.setup == "keys":
        return (f"batched pgbench_accounts key lookups ({KEYS_BATCH} keys per statement, "
                + ("uniform" if args.skew == 1 else f"rank n·u^{args.skew:g}") + ")")
    if args.setup == "tpcb":
        return "pgbench TPC-B (tpcb-like), 4 clients"
    return args.mix if args.setup == "tpch" else "skewed lineitem lookups"


# ---------------------------------------------------------------------------------------------
# measuring


def _record_row(record: PointRecord, size: int, n: int, cost_s: float) -> dict[str, Any]:
    return {"size": size, "pass": n, "cost_s": cost_s, "restart_s": record.restart_s,
            "failure": record.failure,
            "samples": [{"qpm": s.qpm, "completed": s.completed, "seconds": s.seconds}
                        for s in record.samples]}


def open_cluster(args: argparse.Namespace) -> tuple[LocalCluster, dict[str, Any]]:
    """The setup's cluster, started in its memory cgroup with the data loaded; with its
    database's DSN, catalog, original shared_buffers, version and size."""
    from workloads.tpch.load import load_tpch

    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    if args.setup == "tpcb":
        load_tpcb_unlimited(state, args.pgbench_scale)
    cluster = LocalCluster(state / "cluster", memory_limit_bytes=args.memory_limit_mb * MB)
    if cluster.is_initialized():
        cluster.stop()
    cluster.start()
    try:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                [DBNAME]).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
            conn.execute("ALTER SYSTEM SET max_parallel_workers_per_gather = 0")
            conn.execute("SELECT pg_reload_conf()")
        dsn = cluster.dsn_for(DBNAME)
        if args.setup in ("keys", "tpcb"):
            database_bytes = load_keys(dsn, args.pgbench_scale)
        else:
            database_bytes = load_tpch(dsn, args.scale, workdir=state / "tpch-data"
                                       ).database_bytes
        with psycopg.connect(dsn) as conn:
            catalog = KnobCatalog.from_connection(conn)
            original = str(conn.execute("SHOW shared_buffers").fetchone()[0])  # type: ignore[index]
            version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    except BaseException:
        cluster.stop()
        raise
    return cluster, {"dsn": dsn, "catalog": catalog, "original": original,
                     "version": version, "database_bytes": database_bytes}


def run_measurements(args: argparse.Namespace) -> dict[str, Any]:
    """Load, then interleave sweep passes and probe sets on one cluster; leave it stopped."""
    cluster, opened = open_cluster(args)
    dsn, catalog, original = opened["dsn"], opened["catalog"], opened["original"]
    version, database_bytes = opened["version"], opened["database_bytes"]
    rows: list[dict[str, Any]] = []
    probe_sets: list[dict[str, Any]] = []
    try:
        controller = LocalController(cluster, precheck_memory=False)
        # the tuner's own estimator for the workload (progress for TPC-H streams)
        estimator = default_estimator("tpch") if args.setup == "tpch" else "count"
        measure = MeasureConfig(warmup_s=args.warmup, samples=args.samples,
                                queries=None, seconds=args.seconds, aggregate="mean",
                                estimator=estimator)
        measurer = Measurer(ServerAccess(dsn, catalog, controller), make_workload(args, dsn),
                            measure)
        measurer.in_force = {"shared_buffers": original}
        lo, hi = args.sizes[0], args.sizes[-1]
        p_sizes = probe_sizes(lo, hi, args.probes, step=STEP_MB * MB)
        references: list[dict[str, Any]] = []
        try:
            for n in range(args.passes):
                order = args.sizes if n % 2 == 0 else list(reversed(args.sizes))
                for i, size in enumerate(order):
                    started = time.monotonic()
                    record = measurer.measure("sweep", {"shared_buffers": size // MB},
                                              {"shared_buffers": _size_text(size)},
                                              check_budget=False)
                    rows.append(_record_row(record, size, n, time.monotonic() - started)
                                | {"load_average": list(os.getloadavg())})
                    logger.info("sweep %s pass %d: %s qpm (%.1f s)", _size_text(size), n,
                                record.value, rows[-1]["cost_s"])
                    following = order[i + 1] if i + 1 < len(order) else None
                    if (i % REFERENCE_EVERY == 1 and _size_text(size) != original
                            and (following is None or _size_text(following) != original)):
                        # what the tuner's paired block adds to each offline candidate: the
                        # reference (the server's own size) restarted, warmed up, one sample
                        started = time.monotonic()
                        ref = measurer.measure("reference", {}, {"shared_buffers": original},
                                               samples=1, check_budget=False)
                        references.append({"pass": n, "value": ref.value,
                                           "restart_s": ref.restart_s, "failure": ref.failure,
                                           "cost_s": time.monotonic() - started})
                for k in range(args.probe_sets_per_pass):
                    fills: dict[int, BufferFill] = {}
                    probes, failures = run_probes(measurer, p_sizes, args.probe_seconds,
                                                  fills, settle_s=args.settle_s)
                    probe_sets.append({"pass": n, "set": k, "failures": failures,
                                       "load_average": list(os.getloadavg()),
                                       "fills": {str(s): [f.used, f.capacity]
                                                 for s, f in fills.items()},
                                       "probes": [p.to_dict() | {"touched": p.touched}
                                                  for p in probes]})
            measurer.apply({"shared_buffers": original}, warm_up=False)
        finally:
            measurer.close()
    finally:
        cluster.stop()
    return {"setup": args.setup, "scale": args.scale, "database_bytes": database_bytes,
            "data": data_text(args), "mix": mix_text(args),
            "server_version": version, "memory_limit_bytes": cluster.memory_limit_bytes,
            "warmup_s": args.warmup, "samples": args.samples, "sample_s": args.seconds,
            "passes": args.passes, "probe_seconds": args.probe_seconds,
            "settle_s": args.settle_s,
            "probe_sizes": p_sizes, "rows": rows, "probe_sets": probe_sets,
            "estimator": estimator, "original": original, "references": references}


# ---------------------------------------------------------------------------------------------
# analysis


def _probe_from_dict(d: dict[str, Any]) -> Probe:
    return Probe(size=int(d["size"]), hits=int(d["hits"]), reads=int(d["reads"]),
                 window_s=float(d["window_s"]), cost_s=float(d["cost_s"]),
                 touched={str(k): int(v) for k, v in d.get("touched", {}).items()},
                 settled=str(d.get("settled", "")), settle_s=float(d.get("settle_s", 0.0)))


def _samples_by_size(rows: list[dict[str, Any]]) -> dict[int, list[float]]:
    """Every sample's throughput of every pass, by shared_buffers size."""
    by_size: dict[int, list[float]] = {}
    for row in rows:
        by_size.setdefault(int(row["size"]), []).extend(s["qpm"] for s in row["samples"])
    return by_size


def sweep_points(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per size: mean throughput over every sample of every pass, the sample CV."""
    by_size = _samples_by_size(rows)
    out = []
    for size in sorted(by_size):
        qpms = by_size[size]
        mean = statistics.fmean(qpms)
        out.append({"size": size, "qpm": mean, "n": len(qpms),
                    "ci95": 1.96 * statistics.stdev(qpms) / math.sqrt(len(qpms))
                    if len(qpms) > 1 else 0.0,
                    "cv": statistics.stdev(qpms) / mean if len(qpms) > 1 and mean else 0.0})
    return out


def decisions(measured: dict[str, Any], min_r2: float) -> list[dict[str, Any]]:
    """The decision of every measured probe set, as the tuner makes it."""
    lo, hi = measured["probe_sizes"][0], measured["probe_sizes"][-1]
    out = []
    for ps in measured["probe_sets"]:
        probes = [_probe_from_dict(d) for d in ps["probes"]]
        decision = decide(probes, touched_pages=touched_pages(probes) or None, low=lo,
                          high=hi, min_r2=min_r2)
        fills = {int(s): BufferFill(int(f[0]), int(f[1]))
                 for s, f in ps.get("fills", {}).items()}
        if "fills" in ps:  # recorded since the flat-curve rule needs them (issue 31)
            decision = flat_needs_a_full_buffer(decision, fills)
        window = search_window(decision, lo, hi, STEP_MB * MB)
        out.append({"kind": decision.kind, "reason": decision.reason,
                    "r2": decision.fit.r2 if decision.fit is not None else None,
                    "m_star": decision.fit.params.m_star if decision.fit is not None else None,
                    "size": decision.size, "window": window,
                    "cost_s": sum(p.cost_s for p in probes),
                    "misses": [[p.size, p.miss] for p in probes if p.accesses],
                    "settled": [p.settled for p in probes]})
    return out


def replay_search(table: Table, space: Space, start_mb: int, budget: int, *, noise_cv: float,
                  seed: int, target: float, radius: float | None = None
                  ) -> tuple[int | None, list[int], list[float]]:
    """One 2-vertex Nelder-Mead session on the table (first step ``radius`` of the range when
    given, as the tuner's probed search; else the strategy's default); the evaluation count at
    which a size within the target is first evaluated (None: never within ``budget``), the
    sizes evaluated and the (noisy) values measured there."""
    objective = replay_objective(table, "shared_buffers", "qpm", unit=MB, seed=seed,
                                 model=point_noise_only(noise_cv, shape="normal"))
    core = _session(space, start_mb, seed, "replay", radius=radius)
    evaluated: list[int] = []
    measured: list[float] = []
    reached: int | None = None
    while len(evaluated) < budget:
        got = core.fetch("bench")
        if got is None:
            break
        size_mb = int(got.point["shared_buffers"])
        evaluated.append(size_mb)
        if reached is None and table.value("qpm", size_mb * MB) >= target:
            reached = len(evaluated)
        value = objective.measure(got.point, objective.model.point_seconds)
        measured.append(float(value))
        core.report(got.trial_id, value)
    return reached, evaluated, measured


def pick_after(table: Table, sizes: list[int], measured: list[float], k: int) -> tuple[float, int]:
    """The size a search keeps after its first ``k`` evaluations (the best measured, as the
    tuner puts it in force) and its sweep throughput."""
    best = max(range(min(k, len(sizes))), key=lambda i: measured[i])
    return float(table.value("qpm", sizes[best] * MB)), sizes[best]


def _boot_mean_ci(values: list[float], rng: np.random.Generator,
                  reps: int = 4000) -> tuple[float, float, float]:
    arr = np.asarray(values, dtype=float)
    means = arr[rng.integers(0, arr.size, (reps, arr.size))].mean(axis=1)
    return float(arr.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _boot_ratio_ci(a: list[float], b: list[float], rng: np.random.Generator,
                   reps: int = 4000) -> tuple[float, float, float]:
    """mean(a)/mean(b) with a bootstrap interval over paired runs (same start and seed)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    idx = rng.integers(0, x.size, (reps, x.size))
    ratios = x[idx].mean(axis=1) / y[idx].mean(axis=1)
    return (float(x.mean() / y.mean()), float(np.percentile(ratios, 2.5)),
            float(np.percentile(ratios, 97.5)))


def _overlap(points: list[dict[str, Any]]) -> bool:
    """True when the best and the worst size's 95 % intervals overlap."""
    hi = max(points, key=lambda p: p["qpm"])
    lo = min(points, key=lambda p: p["qpm"])
    return bool(hi["qpm"] - hi["ci95"] <= lo["qpm"] + lo["ci95"])


def knee_ratio(rows: list[dict[str, Any]], rng: np.random.Generator,
               reps: int = 4000) -> dict[str, Any]:
    """Throughput of the best sweep size over the smallest's, with a 95 % bootstrap interval
    over each size's samples (how much shared_buffers matters at all)."""
    by_size = _samples_by_size(rows)
    best_size = max(by_size, key=lambda k: statistics.fmean(by_size[k]))
    a, b = np.asarray(by_size[best_size]), np.asarray(by_size[min(by_size)])
    ratios = (a[rng.integers(0, a.size, (reps, a.size))].mean(axis=1)
              / b[rng.integers(0, b.size, (reps, b.size))].mean(axis=1))
    return {"best_size": best_size,
            "ratio": (float(a.mean() / b.mean()), float(np.percentile(ratios, 2.5)),
                      float(np.percentile(ratios, 97.5)))}


def _wilson(k: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson interval of a share k/n (scipy's binomial test)."""
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def compare(measured: dict[str, Any], *, budget: int, seeds: int, min_r2: float,
            plain_evals: int = OFFLINE_SESSION.evaluations,
            probed_evals: int = ProbeConfig.evaluations) -> dict[str, Any]:
    points = sweep_points(measured["rows"])
    table = Table([{"size": p["size"], "qpm": p["qpm"], "miss": 0.0, "accesses_per_sample": 1}
                   for p in points])
    best = max(p["qpm"] for p in points)
    target = 0.95 * best
    sizes_mb = [p["size"] // MB for p in points]
    lo_mb, hi_mb = sizes_mb[0], sizes_mb[-1]
    space = Space((IntParam("shared_buffers", lo_mb, hi_mb, STEP_MB, unit="MB"),))
    noise = float(np.median([p["cv"] for p in points]))
    eval_cost = statistics.fmean(r["cost_s"] for r in measured["rows"] if not r["failure"])
    refs = [r["cost_s"] for r in measured.get("references", []) if not r["failure"]]
    # the tuner's offline evaluation is a paired block: the candidate plus one reference
    # measurement (restart to the server's own size, warm-up, one sample); runs measured
    # before references were recorded have only the unpaired cost
    ref_cost = statistics.fmean(refs) if refs else None
    block_cost = eval_cost + (ref_cost or 0.0)
    decided = decisions(measured, min_r2)
    sweep = {"points": points, "best_qpm": best, "target_qpm": target, "noise_cv": noise,
             # how easy the target is: sweep sizes already within it, and whether the best
             # and the worst size's 95 % intervals overlap (flat within the noise)
             "sizes_within_target": [p["size"] for p in points if p["qpm"] >= target],
             "flat_within_noise": _overlap(points), "eval_cost_s": eval_cost,
             "reference_cost_s": ref_cost, "block_cost_s": block_cost,
             "knee_ratio": knee_ratio(measured["rows"], np.random.default_rng(11)),
             "decisions": decided}
    if not decided:
        return sweep
    starts = [s for s in (lo_mb, (lo_mb + hi_mb) // 2 // STEP_MB * STEP_MB, hi_mb)]
    runs: list[dict[str, Any]] = []
    for start in starts:
        for seed in range(seeds):
            d = decided[(seed + start) % len(decided)]
            cv = noise if seed > 0 else 0.0
            plain_at, plain_seq, plain_vals = replay_search(
                table, space, start, budget, noise_cv=cv, seed=seed, target=target)
            plain_kept, plain_kept_mb = pick_after(table, plain_seq, plain_vals, plain_evals)
            plain_spent = min(plain_evals, len(plain_seq))
            usable = d["window"] is not None
            if usable:
                s_b, lo_b, hi_b = d["window"]
                narrowed = space.narrowed({"shared_buffers": (lo_b // MB, hi_b // MB)})
                prior_at, prior_seq, prior_vals = replay_search(
                    table, narrowed, s_b // MB, budget, noise_cv=cv, seed=seed, target=target,
                    radius=search_radius(s_b, lo_b, hi_b, STEP_MB * MB))
                # the tuner's probed search stops after bme.evaluations
                kept, kept_mb = pick_after(table, prior_seq, prior_vals, probed_evals)
                spent = min(probed_evals, len(prior_seq))
            else:  # the plain search goes on, with its whole budget
                prior_at, prior_seq = plain_at, plain_seq
                kept, kept_mb, spent = plain_kept, plain_kept_mb, plain_spent
            # the plain search cut to the probed budget: what the probes' own cost buys
            plain_short, _ = pick_after(table, plain_seq, plain_vals, probed_evals)
            runs.append({"start_mb": start, "seed": seed, "plain_at": plain_at,
                         "prior_at": prior_at, "prior_used": usable,
                         "probe_cost_s": d["cost_s"], "decision": d["kind"],
                         "plain_seq": plain_seq, "prior_seq": prior_seq,
                         "plain_pick": plain_kept / best, "plain_pick_mb": plain_kept_mb,
                         "plain_short_pick": plain_short / best,
                         "prior_pick": kept / best, "prior_pick_mb": kept_mb,
                         # seconds each search spends under its budget (paired blocks)
                         "plain_kept_s": plain_spent * block_cost,
                         "prior_kept_s": spent * block_cost + d["cost_s"]})

    def evals(at: int | None) -> float:
        return float(at) if at is not None else float(budget + 1)  # censored: budget + 1

    rng = np.random.default_rng(7)
    plain_e = [evals(r["plain_at"]) for r in runs]
    prior_e = [evals(r["prior_at"]) for r in runs]
    plain_s = [e * block_cost for e in plain_e]
    probe_s = [r["probe_cost_s"] for r in runs]
    prior_s = [e * block_cost + c for e, c in zip(prior_e, probe_s, strict=True)]
    plain_u = [e * eval_cost for e in plain_e]
    prior_u = [e * eval_cost + c for e, c in zip(prior_e, probe_s, strict=True)]
    by_start = {start: {key: statistics.fmean(evals(r[f"{key}_at"]) for r in runs
                                              if r["start_mb"] == start)
                        for key in ("plain", "prior")}
                for start in starts}
    used = sum(r["prior_used"] for r in runs)
    r2s = [d["r2"] for d in decided if d["r2"] is not None]
    probe_cost = statistics.fmean(d["cost_s"] for d in decided)
    per_probe = [p["cost_s"] for ps in measured["probe_sets"] for p in ps["probes"]]
    return sweep | {
        "fixed_budget": _fixed_budget(runs, plain_evals, probed_evals,
                                      np.random.default_rng(13)),
        "space_mb": [lo_mb, hi_mb, STEP_MB], "budget": budget, "seeds": seeds,
        "starts_mb": starts,
        "probe_cost_s": {"per_probe_mean": statistics.fmean(per_probe),
                         "per_set_mean": probe_cost,
                         "ratio_probe_to_eval": statistics.fmean(per_probe) / eval_cost,
                         "set_to_block": probe_cost / block_cost},
        "r2": {"values": r2s, "mean": statistics.fmean(r2s) if r2s else None,
               "min": min(r2s) if r2s else None, "max": max(r2s) if r2s else None},
        "prior_used": {"runs": len(runs), "used": used, "share": used / len(runs),
                       "wilson95": _wilson(used, len(runs))},
        "decision_sets": {"sets": len(decided),
                          "usable": sum(d["window"] is not None for d in decided),
                          "wilson95": _wilson(sum(d["window"] is not None for d in decided),
                                              len(decided))},
        "evals": {"plain": _boot_mean_ci(plain_e, rng), "prior": _boot_mean_ci(prior_e, rng),
                  "ratio": _boot_ratio_ci(prior_e, plain_e, rng)},
        "wall_s": {"plain": _boot_mean_ci(plain_s, rng), "prior": _boot_mean_ci(prior_s, rng),
                   "ratio": _boot_ratio_ci(prior_s, plain_s, rng)},
        "wall_unpaired_s": {"plain": _boot_mean_ci(plain_u, rng),
                            "prior": _boot_mean_ci(prior_u, rng),
                            "ratio": _boot_ratio_ci(prior_u, plain_u, rng)},
        "evals_by_start": by_start,
        "reached": {"plain": sum(r["plain_at"] is not None for r in runs),
                    "prior": sum(r["prior_at"] is not None for r in runs)},
        "noise_free_runs": [r for r in runs if r["seed"] == 0],
        # per run, for pooling sweeps (--pool): evaluations to the target (budget + 1 when
        # never), the kept size's share of the best and the seconds each search spent
        "runs": [{"plain_e": pe, "prior_e": qe, "plain_pick": r["plain_pick"],
                  "prior_pick": r["prior_pick"], "plain_short_pick": r["plain_short_pick"],
                  "plain_s": ps, "prior_s": qs,
                  "plain_kept_s": r["plain_kept_s"], "prior_kept_s": r["prior_kept_s"]}
                 for r, pe, qe, ps, qs in zip(runs, plain_e, prior_e, plain_s, prior_s,
                                              strict=True)],
    }


# ---------------------------------------------------------------------------------------------
# report


def _fixed_budget(runs: list[dict[str, Any]], plain_evals: int, probed_evals: int,
                  rng: np.random.Generator) -> dict[str, Any]:
    """The tuner's own budgets: the size each search keeps (its best measured) after
    offline.evaluations (plain) or bme.evaluations (after usable probes), as a share of the
    sweep's best, and the wall-clock each spends (paired blocks, probes included)."""
    plain = [r["plain_pick"] for r in runs]
    prior = [r["prior_pick"] for r in runs]
    short = [r["plain_short_pick"] for r in runs]
    plain_s = [r["plain_kept_s"] for r in runs]
    prior_s = [r["prior_kept_s"] for r in runs]
    difference = _boot_mean_ci([q - p for p, q in zip(plain, prior, strict=True)], rng)
    return {"plain_evals": plain_evals, "probed_evals": probed_evals,
            "plain_pick": _boot_mean_ci(plain, rng), "prior_pick": _boot_mean_ci(prior, rng),
            "plain_short_pick": _boot_mean_ci(short, rng),
            "plain_short_within": sum(v >= 0.95 for v in short),
            "difference": difference,
            "plain_within": sum(v >= 0.95 for v in plain),
            "prior_within": sum(v >= 0.95 for v in prior), "runs": len(runs),
            "plain_mb": statistics.fmean(r["plain_pick_mb"] for r in runs),
            "prior_mb": statistics.fmean(r["prior_pick_mb"] for r in runs),
            "wall_s": {"plain": _boot_mean_ci(plain_s, rng), "prior": _boot_mean_ci(prior_s, rng),
                       "ratio": _boot_ratio_ci(prior_s, plain_s, rng)}}


def _ci(t: tuple[float, float, float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(t[0])} ({fmt.format(t[1])}–{fmt.format(t[2])})"


def _fixed_budget_lines(an: dict[str, Any]) -> list[str]:
    fb = an.get("fixed_budget")
    if fb is None:
        return []
    return ["## The tuner's budgets: the size each search keeps", "",
            f"The tuner stops the plain offline search after offline.evaluations = "
            f"{fb['plain_evals']} and the probed one after bme.evaluations = "
            f"{fb['probed_evals']} (a fallback after an unusable decision gets the plain "
            f"budget), and keeps the size it measured best. Same replays as above; the kept "
            f"size's sweep throughput as a share of the best; intervals 95 % bootstrap over "
            f"runs (the difference paired by start and seed).", "",
            "| measure | plain | with probes | probes − plain or probes / plain |",
            "|---|---:|---:|---:|",
            f"| kept size's throughput / best | {_ci(fb['plain_pick'], '{:.3f}')} | "
            f"{_ci(fb['prior_pick'], '{:.3f}')} | {_ci(fb['difference'], '{:+.3f}')} |",
            f"| runs keeping a size within 95 % of the best | {fb['plain_within']}/{fb['runs']}"
            f" | {fb['prior_within']}/{fb['runs']} | |",
            f"| plain cut to {fb['probed_evals']} evaluations: kept size / best; runs within "
            f"95 % | {_ci(fb['plain_short_pick'], '{:.3f}')}; "
            f"{fb['plain_short_within']}/{fb['runs']} | | |",
            f"| mean kept size (MB) | {fb['plain_mb']:.0f} | {fb['prior_mb']:.0f} | |",
            f"| wall-clock (s, paired blocks, probes included) | "
            f"{_ci(fb['wall_s']['plain'], '{:.0f}')} | {_ci(fb['wall_s']['prior'], '{:.0f}')} "
            f"| {_ci(fb['wall_s']['ratio'], '{:.3f}')} |", ""]


def _window_lines(an: dict[str, Any]) -> list[str]:
    """Whether each probe set's search window holds the sweep's best size (a window that
    excludes it would confine the search away from the best)."""
    best = max(an["points"], key=lambda p: p["qpm"])["size"]
    near = an["sizes_within_target"]
    out = [f"Sweep's best size {_size_text(best)}; sizes within 95 % of it: "
           + ", ".join(_size_text(x) for x in near) + "."]
    for i, d in enumerate(an["decisions"]):
        settled = ", ".join(x or "cold" for x in d.get("settled", []))
        if d["window"] is None:
            out.append(f"- set {i} ({settled}): no window, the search keeps its whole range")
            continue
        lo, hi = d["window"][1], d["window"][2]
        out.append(f"- set {i} ({settled}): window {lo // MB}..{hi // MB} MB "
                   + ("holds" if lo <= best <= hi else "**excludes**")
                   + f" the best size; {sum(lo <= x <= hi for x in near)} of {len(near)} "
                   f"sizes within 95 % inside")
    return out


def _markdown(report: dict[str, Any]) -> str:
    m, meas, an = report["machine"], report["measured"], report["analysis"]
    lines = [f"# BME probes as a shared_buffers prior: {meas['setup']}", "",
             f"Command: `{report['command']}`  ",
             *([f"Re-analysed with the current rules: `{report['reanalysed']}`  "]
               if report.get("reanalysed") else []),
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_bytes'] / 2**30:.1f} GiB RAM, "
             f"PostgreSQL {meas['server_version']}; load average (1 min) at start "
             f"{m['load_average_start'][0]:.2f}, at end {report['load_average_end'][0]:.2f} "
             "(shared with other jobs).  ",
             f"Measuring took {report['measure_seconds']:.0f} s.", "",
             f"{meas.get('data', 'TPC-H SF ' + str(meas['scale']))} "
             f"({meas['database_bytes'] / MB:.0f} MB), workload "
             f"`{meas['mix']}`, embedded cluster in a memory cgroup of "
             f"{meas['memory_limit_bytes'] // MB} MB"
             + (" (smaller than the database: misses cost reads the OS cache cannot all "
                "absorb)" if meas["memory_limit_bytes"] < meas["database_bytes"] else
                " (larger than the database: a miss costs a read from the OS cache)")
             + ". Sweep: per size restart, "
             f"{meas['warmup_s']:g} s warm-up, {meas['samples']} samples of "
             f"{meas['sample_s']:g} s, {meas['passes']} passes in alternating order; after "
             f"each pass {len(meas['probe_sets']) // max(1, meas['passes'])} probe set(s) of "
             f"{len(meas['probe_sizes'])} probes ("
             + ", ".join(_size_text(s) for s in meas["probe_sizes"])
             + f"), each restart + {meas['probe_seconds']:g} s window"
             + (f" once the buffer settled (at most {meas['settle_s']:g} s)."
                if meas.get("settle_s") else " from the cold buffer."), "",
             "## Sweep (throughput by shared_buffers)", "",
             "| shared_buffers | qpm (mean) | 95 % CI | samples | sample CV |",
             "|---:|---:|---:|---:|---:|"]
    for p in an["points"]:
        lines.append(f"| {_size_text(p['size'])} | {p['qpm']:.1f} | ±{p['ci95']:.1f} | "
                     f"{p['n']} | {100 * p['cv']:.1f}% |")
    kr = an["knee_ratio"]
    lines += ["", f"How hard the target (95 % of the best, {an['target_qpm']:.1f} qpm) is: "
              f"{len(an['sizes_within_target'])} of {len(an['points'])} sweep sizes are "
              "within it (" + ", ".join(_size_text(x) for x in an["sizes_within_target"])
              + "); the best and the worst size's 95 % intervals "
              + ("overlap: throughput is flat within the noise." if an["flat_within_noise"]
                 else "do not overlap.")
              + f" Best size ({_size_text(kr['best_size'])}) over the smallest: "
              f"{_ci(kr['ratio'])} (95 % bootstrap over samples)."]
    if not an["decisions"]:
        lines += ["", "Sweep only (a pilot: no probe sets measured).", ""]
        return "\n".join(lines)
    pc = an["probe_cost_s"]
    lines += ["", "## Probe sets and their decisions", "",
              f"Cost: a probe {pc['per_probe_mean']:.2f} s, a probe set {pc['per_set_mean']:.1f} s;"
              f" a full evaluation (restart + warm-up + samples) {an['eval_cost_s']:.1f} s: "
              f"**one probe costs {pc['ratio_probe_to_eval']:.3f} of an evaluation** "
              f"(a set of {len(meas['probe_sizes'])}: "
              f"{pc['per_set_mean'] / an['eval_cost_s']:.2f} evaluations)."
              + (f" The tuner measures an offline candidate in a paired block, which adds a "
                 f"reference measurement (restart to {meas['original']}, warm-up, one sample: "
                 f"{an['reference_cost_s']:.1f} s, {len(meas['references'])} timed): a block "
                 f"costs {an['block_cost_s']:.1f} s and **a probe set "
                 f"{pc['set_to_block']:.2f} of a block**."
                 if an.get("reference_cost_s") else
                 " (No reference measurements recorded: wall-clock below counts the unpaired "
                 "evaluation.)"), "",
              "| set | P by size | decision | R² | M* | size | search window (MB) |",
              "|---:|---|---|---:|---:|---:|---|"]
    for i, d in enumerate(an["decisions"]):
        misses = " ".join(f"{p:.3f}" for _, p in d["misses"])
        window = (f"start {d['window'][0] // MB}, {d['window'][1] // MB}..{d['window'][2] // MB}"
                  if d["window"] else "—")
        lines.append(f"| {i} | {misses} | {d['kind']} | "
                     + (f"{d['r2']:.3f}" if d["r2"] is not None else "—") + " | "
                     + (f"{d['m_star'] / MB:.0f} MB" if d["m_star"] else "—") + " | "
                     + (f"{d['size'] // MB} MB" if d["size"] else "—") + f" | {window} |")
    lines += ["", "Decisions' reasons:", ""]
    lines += [f"- set {i}: {d['reason']}" for i, d in enumerate(an["decisions"])]
    lines += ["", *_window_lines(an)]
    r2 = an["r2"]
    pu, ds = an["prior_used"], an["decision_sets"]
    lines += ["", "## Offline search: plain 2-vertex Nelder-Mead vs after the probes", "",
              f"Replayed on the sweep (linear in log size between sizes; "
              f"{100 * an['noise_cv']:.1f}% multiplicative noise, the median sample CV; seed 0 "
              f"noise-free), space {an['space_mb'][0]}..{an['space_mb'][1]} MB step "
              f"{an['space_mb'][2]} MB, budget {an['budget']} evaluations, starts "
              f"{an['starts_mb']} MB × {an['seeds']} seeds; each prior run uses one of the "
              f"{ds['sets']} measured probe sets in turn. Target: a size whose sweep throughput"
              f" is ≥ 95 % of the best ({an['best_qpm']:.1f} qpm) = {an['target_qpm']:.1f} "
              f"qpm. A run that never reaches it counts as budget + 1 evaluations. Intervals: "
              f"95 % bootstrap over runs (ratios over paired runs), Wilson for shares.", "",
              "| measure | plain | with probes | ratio (probes / plain) |",
              "|---|---:|---:|---:|",
              f"| full evaluations to target | {_ci(an['evals']['plain'])} | "
              f"{_ci(an['evals']['prior'])} | {_ci(an['evals']['ratio'], '{:.3f}')} |",
              "| wall-clock to target (s, probes included; "
              + ("the tuner's paired blocks" if an.get("reference_cost_s") else "unpaired")
              + ") | "
              f"{_ci(an['wall_s']['plain'], '{:.0f}')} | {_ci(an['wall_s']['prior'], '{:.0f}')} | "
              f"{_ci(an['wall_s']['ratio'], '{:.3f}')} |",
              f"| … counting unpaired evaluations (s) | "
              f"{_ci(an['wall_unpaired_s']['plain'], '{:.0f}')} | "
              f"{_ci(an['wall_unpaired_s']['prior'], '{:.0f}')} | "
              f"{_ci(an['wall_unpaired_s']['ratio'], '{:.3f}')} |",
              f"| runs reaching the target | {an['reached']['plain']}/{pu['runs']} | "
              f"{an['reached']['prior']}/{pu['runs']} | |", "",
              f"Prior used in {pu['used']}/{pu['runs']} runs = {100 * pu['share']:.0f} % "
              f"(95 % {100 * pu['wilson95'][0]:.0f}–{100 * pu['wilson95'][1]:.0f} %); usable "
              f"decisions in {ds['usable']}/{ds['sets']} probe sets "
              f"({100 * ds['wilson95'][0]:.0f}–{100 * ds['wilson95'][1]:.0f} %). Fit R² over "
              f"the probe sets: "
              + (f"mean {r2['mean']:.3f}, min {r2['min']:.3f}, max {r2['max']:.3f} "
                 f"({len(r2['values'])} fits)." if r2["values"] else "no fit.") + "", "",
              "Mean full evaluations to the target by start (plain → with probes; the tuner's "
              "plain search starts at the server's own size, " + meas.get("original", "?")
              + "): " + ", ".join(f"{k} MB {v['plain']:.2f} → {v['prior']:.2f}"
                                   for k, v in an["evals_by_start"].items()) + ".", "",
              *_fixed_budget_lines(an), "Noise-free sessions (evaluated sizes in MB):", ""]
    for r in an["noise_free_runs"]:
        lines.append(f"- start {r['start_mb']} MB: plain {r['plain_seq']} (target at "
                     f"{r['plain_at']}); with probes ({r['decision']}) {r['prior_seq']} "
                     f"(target at {r['prior_at']})")
    lines.append("")
    return "\n".join(lines)


def pooled(files: list[Path], rng: np.random.Generator, reps: int = 4000) -> dict[str, Any]:
    """Several sweeps' replays pooled, with a two-level bootstrap (sweeps with replacement,
    then runs within each drawn sweep), so the interval carries the spread between sweeps,
    not only between replays of one sweep."""
    sweeps = []
    for f in files:
        an = json.loads(f.read_text())["analysis"]
        if not an or "runs" not in an:
            raise SystemExit(f"{f}: no per-run analysis; re-analyse it with --from-json first")
        sweeps.append({k: np.asarray([r[k] for r in an["runs"]], dtype=float)
                       for k in an["runs"][0]})
    keys = list(sweeps[0])
    draws: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(reps):
        chosen = rng.integers(0, len(sweeps), len(sweeps))
        for k in keys:
            draws[k].append(float(np.mean([
                sweeps[i][k][rng.integers(0, sweeps[i][k].size, sweeps[i][k].size)].mean()
                for i in chosen])))
    point = {k: float(np.mean([s[k].mean() for s in sweeps])) for k in keys}
    d = {k: np.asarray(v) for k, v in draws.items()}

    def ratio(a: str, b: str) -> tuple[float, float, float]:
        r = d[a] / d[b]
        return (point[a] / point[b], float(np.percentile(r, 2.5)),
                float(np.percentile(r, 97.5)))

    diff = d["prior_pick"] - d["plain_pick"]
    short = d["prior_pick"] - d["plain_short_pick"]
    return {"files": [f.name for f in files], "sweeps": len(sweeps),
            "per_sweep": [{k: float(s[k].mean()) for k in keys} for s in sweeps],
            "evals": ratio("prior_e", "plain_e"), "wall": ratio("prior_s", "plain_s"),
            "kept_wall": ratio("prior_kept_s", "plain_kept_s"),
            "plain_pick": point["plain_pick"], "prior_pick": point["prior_pick"],
            "pick_difference": (point["prior_pick"] - point["plain_pick"],
                                float(np.percentile(diff, 2.5)),
                                float(np.percentile(diff, 97.5))),
            "plain_short_pick": point["plain_short_pick"],
            "short_difference": (point["prior_pick"] - point["plain_short_pick"],
                                 float(np.percentile(short, 2.5)),
                                 float(np.percentile(short, 97.5)))}


def _pooled_markdown(pool: dict[str, Any], command: str) -> str:
    lines = ["# BME probes as a shared_buffers prior: sweeps pooled", "",
             f"Command: `{command}`  ", "Intervals: 95 %, two-level bootstrap (sweeps with "
             "replacement, then the replays within each).", "",
             "| sweep | evaluations to target, probes / plain | wall-clock to target | kept "
             "size / best, plain → probes | wall-clock of the tuner's budgets |",
             "|---|---:|---:|---:|---:|"]
    for name, s in zip(pool["files"], pool["per_sweep"], strict=True):
        lines.append(f"| {name} | {s['prior_e'] / s['plain_e']:.2f} | "
                     f"{s['prior_s'] / s['plain_s']:.2f} | {s['plain_pick']:.3f} → "
                     f"{s['prior_pick']:.3f} | {s['prior_kept_s'] / s['plain_kept_s']:.2f} |")
    lines += ["", f"Pooled over {pool['sweeps']} sweeps:", "",
              f"- evaluations to 95 % of the best, probes / plain: {_ci(pool['evals'])}",
              f"- wall-clock to 95 % of the best (probes included): {_ci(pool['wall'])}",
              f"- the kept size's throughput / best: plain {pool['plain_pick']:.3f}, with "
              f"probes {pool['prior_pick']:.3f}; difference "
              f"{_ci(pool['pick_difference'], '{:+.3f}')}; plain cut to the probed budget "
              f"{pool['plain_short_pick']:.3f} (probes − that: "
              f"{_ci(pool['short_difference'], '{:+.3f}')})",
              f"- wall-clock of the tuner's budgets (probes included): "
              f"{_ci(pool['kept_wall'])}", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", choices=["tpch", "lookup", "keys", "tpcb"], required=True)
    parser.add_argument("--pgbench-scale", type=int, default=8,
                        help="keys setup: pgbench -i scale (about 15 MB per unit)")
    parser.add_argument("--skew", type=float, default=1.0,
                        help="keys setup: key rank n·u^skew (1 = uniform)")
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--scale", type=float, default=0.3)
    parser.add_argument("--mix", default=TPCH_MIX,
                        help="tpch setup: the concurrent query mix, e.g. 2Q21,1Q5,1Q20")
    parser.add_argument("--memory-limit-mb", type=int, default=320)
    parser.add_argument("--sizes-mb", default="16,32,48,64,96,128,160,192")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--probe-seconds", type=float, default=3.0)
    parser.add_argument("--probe-sets-per-pass", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=ProbeConfig.settle_s,
                        help="the probes' settle budget (0: cold windows, the earlier runs)")
    parser.add_argument("--budget", type=int, default=10)
    parser.add_argument("--plain-evals", type=int, default=OFFLINE_SESSION.evaluations,
                        help="the plain search's budget (the tuner's offline.evaluations)")
    parser.add_argument("--probed-evals", type=int, default=ProbeConfig.evaluations,
                        help="the probed search's budget (the tuner's bme.evaluations)")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--min-r2", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tag", default="", help="suffix of the result files' names")
    parser.add_argument("--from-json")
    parser.add_argument("--pool", help="comma-separated result JSONs to pool (no measuring)")
    args = parser.parse_args()
    if args.pool:
        pool = pooled([Path(f) for f in args.pool.split(",")], np.random.default_rng(17))
        stem = f"bme_probes_pooled.{args.tag or args.setup}"
        text = _pooled_markdown(pool, ".venv/bin/python -m benchmarks.bme_probes "
                                + " ".join(sys.argv[1:]))
        (RESULTS / f"{stem}.json").write_text(json.dumps(pool, indent=2) + "\n")
        (RESULTS / f"{stem}.md").write_text(text)
        print(text)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args.sizes = [int(s) * MB for s in args.sizes_mb.split(",")]
    args.state_dir = args.state_dir or f"/var/tmp/harmony-bench-bme-probes-{args.setup}"
    stem = f"bme_probes_{args.setup}" + (f".{args.tag}" if args.tag else "")
    machine = _machine()
    started = time.monotonic()
    if args.from_json:
        earlier = json.loads(Path(args.from_json).read_text())
        measured, machine = earlier["measured"], earlier["machine"]
        measure_seconds = earlier["measure_seconds"]
        load_end = earlier.get("load_average_end", list(os.getloadavg()))
    else:
        measured = run_measurements(args)
        measure_seconds = time.monotonic() - started
        load_end = list(os.getloadavg())
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{stem}.json").write_text(json.dumps(
            {"machine": machine, "measure_seconds": measure_seconds, "measured": measured,
             "load_average_end": load_end, "analysis": None}, indent=2, default=str) + "\n")
    try:
        analysis = compare(measured, budget=args.budget, seeds=args.seeds, min_r2=args.min_r2,
                           plain_evals=args.plain_evals, probed_evals=args.probed_evals)
    except HarmonyError as exc:
        logger.error("analysis failed: %s", exc)
        raise
    command = ("flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.bme_probes "
               + " ".join(sys.argv[1:]))
    report = {"machine": machine, "command": command, "measure_seconds": measure_seconds,
              "load_average_end": load_end, "measured": measured, "analysis": analysis}
    if args.from_json:  # the measurements' own command stays; the re-analysis is noted
        report["command"] = earlier.get("command", command)
        report["reanalysed"] = (".venv/bin/python -m benchmarks.bme_probes "
                                + " ".join(sys.argv[1:]))
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (RESULTS / f"{stem}.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
