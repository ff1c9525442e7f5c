"""The Buffer Miss Equation prior on a real PostgreSQL: measured (shared_buffers, P) points on a
TPC-H mix, the fit (P* from the touched pages and searched), and how many offline evaluations
the prior saves against the plain 2-vertex Nelder-Mead.

The embedded cluster (optionally inside a memory cgroup) is loaded with TPC-H; at each
shared_buffers size the server is restarted, the mix warmed up, and throughput samples are
taken with the ``pg_stat_database`` hit/read deltas beside them (``pg_stat_clear_snapshot()``
before each read). The offline session is then replayed both ways on the measured table
(throughput and P interpolated linearly in log size between measured sizes, with the noise of
:mod:`benchmarks.simulators.replay`), with the same
strategy, starting simplex and prior logic as :mod:`tuner_client.flows`, over several start
points and noise seeds. Writes ``benchmarks/results/bme_prior.json`` and ``.md``
(``--quick``: ``bme_prior.quick.*``).

Run: ``.venv/bin/python -m benchmarks.bme_prior [--quick]``; ``--from-json FILE`` redoes the
analysis on an earlier run's measurements.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from benchmarks.machine import cpu_model
from benchmarks.simulators.replay import MeasuredTable, point_noise_only, replay_objective
from bme import BMEAdvice, SharedBuffersAdvisor, fit_bme, touched_pages_p_star
from bme.fit import BMEFit
from harmony_base.errors import HarmonyError
from harmony_base.space import IntParam, Space
from harmony_core.definition import SessionDefinition
from harmony_core.session import SessionCore
from tuner_client.measurer import read_database_stats, stats_delta
from tuner_client.servers.local_cluster import LocalCluster
from workloads.driver import WorkloadDriver
from workloads.mix import parse_mix
from workloads.tpch.queries import validation_query

logger = logging.getLogger(__name__)

RESULTS = Path(__file__).resolve().parent / "results"
MB = 1 << 20
KB = 1 << 10
DBNAME = "tpch"
#: the replayed offline session works in MB on this grid (as the shipped configs do)
STEP_MB = 8


# ---------------------------------------------------------------------------------------------
# measuring


def _machine() -> dict[str, Any]:
    cpu = cpu_model()
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * KB
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_bytes": mem,
            "python": platform.python_version(), "platform": platform.platform(),
            "load_average_start": list(os.getloadavg())}


def _size_text(size: int) -> str:
    return f"{size // MB}MB" if size % MB == 0 else f"{size // KB}kB"


def _mix_statements(mix: str, scale: float) -> list[str]:
    """The SQL statements of a TPC-H mix (validation parameters)."""
    out: list[str] = []
    for query, _ in parse_mix(mix):
        out += [s for s in validation_query(query, scale).text().split(";") if s.strip()]
    return out


def _plan_relations(conn: psycopg.Connection[Any], statements: list[str]) -> dict[str, int]:
    """Tables and indexes the statements' plans read, with their sizes in 8 kB pages."""
    names: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        for key in ("Relation Name", "Index Name"):
            if key in node:
                names.add(str(node[key]))
        for child in node.get("Plans", []):
            walk(child)

    for statement in statements:
        try:
            row = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + sql.SQL(statement)  # type: ignore[arg-type]
                               ).fetchone()
        except psycopg.Error:
            continue  # e.g. Q15's view statements
        if row:
            walk(row[0][0]["Plan"])
    pages: dict[str, int] = {}
    for name in sorted(names):
        got = conn.execute("SELECT pg_relation_size(%s::regclass) / 8192", [name]).fetchone()
        pages[name] = int(got[0]) if got else 0
    return pages


@dataclass(frozen=True)
class LookupSample:
    """Completed lookups over one window."""

    qpm: float
    completed: int
    errors: int
    seconds: float


class LookupDriver:
    """Skewed primary-key lookups of orders' line items from ``streams`` threads.

    Order keys are shuffled once; a lookup takes the key at rank ``n·u**skew`` (u uniform),
    so a few keys are hot and the hot keys are spread over the table's pages. Throughput is
    looked-up keys per minute (``qpm``).
    """

    def __init__(self, dsn: str, *, streams: int = 4, skew: float = 3.0, seed: int = 1) -> None:
        self.dsn, self.streams, self.skew, self.seed = dsn, streams, skew, seed
        self._keys: np.ndarray | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._completed = 0
        self._errors = 0

    def start(self) -> None:
        if self._keys is None:
            with psycopg.connect(self.dsn) as conn:
                keys = [r[0] for r in conn.execute("SELECT o_orderkey FROM orders")]
            self._keys = np.array(keys, dtype=np.int64)
            np.random.default_rng(self.seed).shuffle(self._keys)
        self._stop.clear()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                         for i in range(self.streams)]
        for thread in self._threads:
            thread.start()

    def _run(self, index: int) -> None:
        assert self._keys is not None
        rng = np.random.default_rng(self.seed * 1000 + index)
        n = self._keys.size
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    ranks = (n * rng.random(LOOKUP_BATCH) ** self.skew).astype(np.int64)
                    try:
                        conn.execute(LOOKUP_SQL, [self._keys[ranks].tolist()], prepare=True)
                    except psycopg.Error:
                        with self._lock:
                            self._errors += 1
                        continue
                    with self._lock:
                        self._completed += LOOKUP_BATCH
        except psycopg.Error as exc:
            logger.warning("lookup stream %d ended: %s", index, exc)

    def sample(self, seconds: float | None = None, **_: Any) -> LookupSample:
        with self._lock:
            c0, e0 = self._completed, self._errors
        t0 = time.monotonic()
        time.sleep(seconds or 1.0)
        with self._lock:
            c1, e1 = self._completed, self._errors
        dt = time.monotonic() - t0
        return LookupSample(60.0 * (c1 - c0) / dt, c1 - c0, e1 - e0, dt)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []


#: one statement looks up a batch of keys (index scans on lineitem_pkey), so the client's
#: round trips do not bound the rate
LOOKUP_SQL = "SELECT sum(l_extendedprice) FROM lineitem WHERE l_orderkey = ANY(%s::bigint[])"
LOOKUP_BATCH = 200


def measure_sizes(cluster: LocalCluster, dsn: str, mix: str, sizes: list[int], *,
                  warmup_s: float, samples: int, seconds: float, passes: int,
                  seed: int) -> list[dict[str, Any]]:
    # mix "lookup": the skewed key-lookup workload; otherwise a TPC-H mix
    """Restart at each size (passes alternate the order) and take samples with stat deltas."""
    rows: list[dict[str, Any]] = []
    for n in range(passes):
        order = sizes if n % 2 == 0 else list(reversed(sizes))
        for size in order:
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(
                    sql.Literal(_size_text(size))))
            started = time.monotonic()
            cluster.restart()
            restart_s = time.monotonic() - started
            driver: Any = (LookupDriver(dsn, seed=seed + n) if mix == "lookup"
                           else WorkloadDriver(dsn, mix, seed=seed + n))
            row: dict[str, Any] = {"size": size, "pass": n, "restart_s": restart_s,
                                   "samples": []}
            with psycopg.connect(dsn, autocommit=True) as conn:
                shown = conn.execute("SELECT current_setting('shared_buffers')").fetchone()
                row["in_force"] = shown[0] if shown else None
                driver.start()
                try:
                    driver.sample(seconds=warmup_s)
                    for _ in range(samples):
                        before = read_database_stats(conn)
                        got = driver.sample(seconds=seconds)
                        delta = stats_delta(before, read_database_stats(conn))
                        if delta is None:
                            continue
                        row["samples"].append({
                            "qpm": got.qpm, "completed": got.completed, "errors": got.errors,
                            "seconds": delta.seconds, "blks_hit": delta.blks_hit,
                            "blks_read": delta.blks_read})
                finally:
                    driver.stop()
            hits = sum(s["blks_hit"] for s in row["samples"])
            reads = sum(s["blks_read"] for s in row["samples"])
            row["miss"] = reads / (hits + reads) if hits + reads else None
            row["qpm"] = statistics.fmean(s["qpm"] for s in row["samples"])
            logger.info("shared_buffers %s (pass %d): %.1f qpm, P = %s, restart %.1f s",
                        _size_text(size), n, row["qpm"],
                        f"{row['miss']:.4f}" if row["miss"] is not None else "n/a", restart_s)
            rows.append(row)
    return rows


def run_measurements(args: argparse.Namespace) -> dict[str, Any]:
    """Start (and load) the embedded cluster, measure every size, leave it stopped."""
    from workloads.tpch.load import load_tpch

    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(state / "cluster", memory_limit_bytes=args.memory_limit_mb * MB
                           if args.memory_limit_mb else None)
    if cluster.is_initialized():
        cluster.stop()
    cluster.start()
    try:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                [DBNAME]).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
        dsn = cluster.dsn_for(DBNAME)
        load = load_tpch(dsn, args.scale, workdir=state / "tpch-data")
        with psycopg.connect(dsn, autocommit=True) as conn:
            statements = ([LOOKUP_SQL.replace("%s", "'{1,2}'")] if args.mix == "lookup"
                          else _mix_statements(args.mix, args.scale))
            relations = _plan_relations(conn, statements)
            version = conn.execute("SHOW server_version").fetchone()
        rows = measure_sizes(cluster, dsn, args.mix, args.sizes, warmup_s=args.warmup,
                             samples=args.samples, seconds=args.seconds, passes=args.passes,
                             seed=args.seed)
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET shared_buffers")
    finally:
        cluster.stop()
    return {"scale": args.scale, "mix": args.mix, "database_bytes": load.database_bytes,
            "server_version": version[0] if version else None,
            "memory_limit_bytes": cluster.memory_limit_bytes,
            "cgroup": bool(args.memory_limit_mb), "relations_pages": relations,
            "warmup_s": args.warmup, "samples": args.samples, "sample_s": args.seconds,
            "passes": args.passes, "rows": rows}


# ---------------------------------------------------------------------------------------------
# analysis


def pooled(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per size: P from the summed deltas of all its samples, mean throughput."""
    by_size: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_size.setdefault(int(row["size"]), []).extend(row["samples"])
    points = []
    for size in sorted(by_size):
        samples = by_size[size]
        hits = sum(s["blks_hit"] for s in samples)
        reads = sum(s["blks_read"] for s in samples)
        qpms = [s["qpm"] for s in samples]
        points.append({"size": size, "blks_hit": hits, "blks_read": reads,
                       "accesses_per_sample": (hits + reads) / len(samples),
                       "miss": reads / (hits + reads), "qpm": statistics.fmean(qpms),
                       "qpm_cv": statistics.pstdev(qpms) / statistics.fmean(qpms)
                       if len(qpms) > 1 else 0.0, "n_samples": len(samples)})
    return points


def _fit_dict(fit: BMEFit | None, error: str | None = None) -> dict[str, Any]:
    if fit is None:
        return {"error": error}
    out = dict(fit.params.to_dict())
    out.update({"r2": fit.r2, "n_points": fit.n_points, "m_star_mb": fit.params.m_star / MB})
    return out


def fits(points: list[dict[str, Any]], p_star: float) -> dict[str, Any]:
    """Whole-range and 3-smallest-sizes fits, with P* given and searched."""
    out: dict[str, Any] = {}
    subsets = {"all": points, "smallest3": points[:3]}
    for label, subset in subsets.items():
        sizes = [p["size"] for p in subset]
        miss = [p["miss"] for p in subset]
        for mode, ps in (("p_star_touched", p_star), ("p_star_searched", None)):
            try:
                out[f"{label}/{mode}"] = _fit_dict(fit_bme(sizes, miss, p_star=ps))
            except HarmonyError as exc:
                out[f"{label}/{mode}"] = _fit_dict(None, str(exc))
    return out


class Table(MeasuredTable):
    """The pooled points as a replay table: throughput (``qpm``) and P (``miss``) by
    shared_buffers size in bytes, linear in log(size) between measured sizes, plus the median
    block accesses per sample window."""

    def __init__(self, points: list[dict[str, Any]]) -> None:
        super().__init__([p["size"] for p in points],
                         {"qpm": [p["qpm"] for p in points],
                          "miss": [p["miss"] for p in points]})
        self.accesses = float(np.median([p["accesses_per_sample"] for p in points]))


def _session(space: Space, start_mb: int, seed: int, label: str, *,
             radius: float | None = None) -> SessionCore:
    options: dict[str, Any] = {"simplex_size": 2, "init_method": "point",
                               "init_point": space.snap({"shared_buffers": start_mb})}
    if radius is not None:
        options["init_radius"] = radius
    definition = SessionDefinition(name=label, space=space, strategy="nelder-mead",
                                   strategy_options=options, maximize=True, objective="qpm",
                                   seed=seed)
    return SessionCore(definition)


_ADVICE_CACHE: dict[tuple[Any, ...], BMEAdvice] = {}


def replay(table: Table, space: Space, start_mb: int, budget: int, *, use_prior: bool,
           p_star: float | None, noise_cv: float, seed: int, target: float,
           min_r2: float) -> dict[str, Any]:
    """One offline session on the measured table; the evaluation at which ``target`` is met.

    Mirrors ``flows._offline_pass``: after each evaluation the point goes to the prior; once
    three sizes exist and the fit is good, a fresh session starts at M* inside the advised
    range with the remaining budget. Reported values carry multiplicative Gaussian noise
    (``noise_cv``); reaching the target is judged on the noise-free table.
    """
    # the noise of the original replay: value × (1 + cv·z), one draw per evaluation
    objective = replay_objective(table, "shared_buffers", "qpm", unit=MB, seed=seed,
                                 model=point_noise_only(noise_cv, shape="normal"))
    prior = SharedBuffersAdvisor(p_star=p_star, min_r2=min_r2) if use_prior else None
    added: list[int] = []
    param = space.params[0]
    assert isinstance(param, IntParam)
    core = _session(space, start_mb, seed, "plain")
    evaluated: list[int] = []
    reached: int | None = None
    advice_text: str | None = None
    switched = False
    while len(evaluated) < budget:
        got = core.fetch("bench")
        if got is None:
            break  # converged (or nothing to hand out): the session ends
        size_mb = int(got.point["shared_buffers"])
        qpm, miss = table.value("qpm", size_mb * MB), table.value("miss", size_mb * MB)
        evaluated.append(size_mb)
        if reached is None and qpm >= target:
            reached = len(evaluated)
        core.report(got.trial_id, objective.measure(got.point,
                                                    objective.model.point_seconds))
        if prior is None or switched or advice_text is not None:
            continue
        reads = int(round(miss * table.accesses))
        prior.add_point(size_mb * MB, int(table.accesses) - reads, reads)
        added.append(size_mb)
        if not prior.ready:
            continue
        # P is a function of the size alone here, so the same sizes give the same fit
        key = (tuple(sorted(added)), p_star, min_r2, param.min, param.upper)
        advice = _ADVICE_CACHE.get(key)
        if advice is None:
            advice = prior.recommend(max_bytes=param.upper * MB, min_bytes=param.min * MB)
            _ADVICE_CACHE[key] = advice
        advice_text = advice.reason
        if not advice.usable or advice.search_range is None or advice.m_star_bytes is None:
            continue
        low = max(param.min, param.snap(advice.search_range[0] / MB))
        high = min(param.upper, param.snap(advice.search_range[1] / MB))
        if high <= low:
            continue
        narrowed = space.narrowed({"shared_buffers": (low, high)})
        core = _session(narrowed, int(round(advice.m_star_bytes / MB)), seed, "bme")
        switched = True
    return {"start_mb": start_mb, "seed": seed, "evaluated_mb": evaluated, "reached_at": reached,
            "prior_used": switched, "prior_reason": advice_text}


def compare(points: list[dict[str, Any]], p_star: float, *, budget: int, starts_mb: list[int],
            seeds: int, min_r2: float, step_mb: int = STEP_MB) -> dict[str, Any]:
    """Evaluations to reach 95 % of the best measured throughput, plain vs with the prior."""
    table = Table(points)
    best = max(p["qpm"] for p in points)
    target = 0.95 * best
    lo_mb = step_mb
    hi_mb = max(p["size"] for p in points) // MB
    space = Space((IntParam("shared_buffers", lo_mb, hi_mb, step_mb, unit="MB"),))
    noise = float(np.median([p["qpm_cv"] for p in points]))
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "prior_touched": [],
                                             "prior_searched": []}
    for start in starts_mb:
        for seed in range(seeds):
            cv = noise if seed > 0 else 0.0  # seed 0: the noise-free replay
            runs["plain"].append(replay(table, space, start, budget, use_prior=False,
                                        p_star=None, noise_cv=cv, seed=seed, target=target,
                                        min_r2=min_r2))
            runs["prior_touched"].append(replay(table, space, start, budget, use_prior=True,
                                                p_star=p_star, noise_cv=cv, seed=seed,
                                                target=target, min_r2=min_r2))
            runs["prior_searched"].append(replay(table, space, start, budget, use_prior=True,
                                                 p_star=None, noise_cv=cv, seed=seed,
                                                 target=target, min_r2=min_r2))

    def summary(items: list[dict[str, Any]]) -> dict[str, Any]:
        # a run that never reaches the target counts as budget + 1 evaluations (censored)
        counts = [r["reached_at"] if r["reached_at"] is not None else budget + 1
                  for r in items]
        return {"runs": len(items),
                "reached": sum(r["reached_at"] is not None for r in items),
                "mean_evals": statistics.fmean(counts), "median_evals": statistics.median(counts),
                "prior_used": sum(r["prior_used"] for r in items),
                "noise_free_by_start": {str(r["start_mb"]): r["reached_at"] for r in items
                                        if r["seed"] == 0}}

    out = {"target_qpm": target, "best_qpm": best, "budget": budget, "starts_mb": starts_mb,
           "seeds": seeds, "noise_cv": noise, "space_mb": [lo_mb, hi_mb, step_mb],
           "min_r2": min_r2, "summary": {k: summary(v) for k, v in runs.items()},
           "noise_free_runs": {k: [r for r in v if r["seed"] == 0] for k, v in runs.items()}}
    plain = out["summary"]["plain"]["mean_evals"]
    for key in ("prior_touched", "prior_searched"):
        out["summary"][key]["saved_vs_plain"] = plain - out["summary"][key]["mean_evals"]
    return out


def analyse(measured: dict[str, Any], *, budget: int, seeds: int, starts_mb: list[int],
            min_r2: float) -> dict[str, Any]:
    points = pooled(measured["rows"])
    relpages = sum(measured["relations_pages"].values())
    accesses = int(np.median([p["accesses_per_sample"] for p in points]))
    p_star = touched_pages_p_star(relpages, accesses) if relpages <= accesses else None
    return {"points": points, "touched_pages": relpages, "accesses_per_sample": accesses,
            "p_star_touched": p_star, "fits": fits(points, p_star) if p_star else {},
            "offline": compare(points, p_star, budget=budget, starts_mb=starts_mb,
                               seeds=seeds, min_r2=min_r2) if p_star else {}}


# ---------------------------------------------------------------------------------------------
# report


def _markdown(report: dict[str, Any]) -> str:
    m, meas, an = report["machine"], report["measured"], report["analysis"]
    gib = m["ram_bytes"] / 2**30
    lines = ["# BME prior on a real PostgreSQL", "",
             f"Command: `{report['command']}`  ",
             f"Machine: {m['cpu']}, {m['cores']} cores, {gib:.1f} GiB RAM, {m['platform']}, "
             f"Python {m['python']}, PostgreSQL {meas['server_version']}; load average at "
             f"start {m['load_average_start'][0]:.2f}, at end {report['load_average_end'][0]:.2f}"
             f" (the machine is shared with other jobs, so throughput is noisy).  ",
             f"Measuring took {report['measure_seconds']:.0f} s.", "",
             f"TPC-H SF {meas['scale']} ({meas['database_bytes'] / MB:.0f} MB), mix "
             f"`{meas['mix']}`, embedded cluster"
             + (f" in a memory cgroup of {meas['memory_limit_bytes'] // MB} MB"
                if meas["cgroup"] else " (no memory cgroup: OS page cache not limited)")
             + f"; per size: restart, {meas['warmup_s']:g} s warm-up, {meas['samples']} samples "
             f"of {meas['sample_s']:g} s, {meas['passes']} pass(es) (alternating order). "
             "P = blks_read/(blks_read+blks_hit) from `pg_stat_database` deltas read after "
             "`pg_stat_clear_snapshot()`, pooled over the samples of a size.", "",
             "Relations the mix's plans read (8 kB pages): "
             + ", ".join(f"{k} {v:,}" for k, v in meas["relations_pages"].items())
             + f"; total {an['touched_pages']:,} pages.", "",
             "## Measured points", "",
             "| shared_buffers | P | qpm (mean) | qpm CV | samples | block accesses / sample |",
             "|---:|---:|---:|---:|---:|---:|"]
    for p in an["points"]:
        lines.append(f"| {_size_text(p['size'])} | {p['miss']:.4f} | {p['qpm']:.1f} | "
                     f"{100 * p['qpm_cv']:.1f}% | {p['n_samples']} | "
                     f"{p['accesses_per_sample']:,.0f} |")
    ps = an["p_star_touched"]
    lines += ["", f"P* from touched pages: {an['touched_pages']:,} / "
              f"{an['accesses_per_sample']:,} accesses per sample window = "
              + (f"{ps:.5f}" if ps is not None else "n/a") + ".", "", "## Fits", "",
              "| points | P* | M* | P* value | Pc | Mb | R² |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for key, f in an["fits"].items():
        subset, mode = key.split("/")
        if f.get("error"):
            lines.append(f"| {subset} | {mode} | error: {f['error']} | | | | |")
            continue
        lines.append(f"| {subset} | {mode} | {f['m_star_mb']:.1f} MB | {f['p_star']:.5f} | "
                     f"{f['p_c']:.4g} | {f['m_b'] / MB:.2f} MB | {f['r2']:.4f} |")
    off = an["offline"]
    if off:
        lines += ["", "## Offline evaluations: plain 2-vertex Nelder-Mead vs the BME prior", "",
                  f"Replayed on the measured table (throughput and P linear in log size "
                  f"between measured sizes), space shared_buffers "
                  f"{off['space_mb'][0]}..{off['space_mb'][1]} MB step {off['space_mb'][2]} MB, "
                  f"budget {off['budget']} evaluations, starts {off['starts_mb']} MB, "
                  f"{off['seeds']} seeds per start (seed 0 noise-free, others with "
                  f"{100 * off['noise_cv']:.1f}% multiplicative noise, the median sample CV "
                  f"measured). Target: 95% of the best measured throughput "
                  f"({off['best_qpm']:.1f} qpm) = {off['target_qpm']:.1f} qpm, judged on the "
                  f"noise-free table. A run that never reaches it counts as budget + 1.", "",
                  "| search | runs | reached | mean evals | median evals | prior used | "
                  "saved vs plain (mean) | noise-free evals by start (MB: evals) |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for key, s in off["summary"].items():
            saved = s.get("saved_vs_plain")
            lines.append(f"| {key} | {s['runs']} | {s['reached']} | {s['mean_evals']:.2f} | "
                         f"{s['median_evals']:g} | {s['prior_used']} | "
                         + (f"{saved:+.2f}" if saved is not None else "—") + " | "
                         + ", ".join(f"{k}: {v if v is not None else '—'}"
                                     for k, v in s["noise_free_by_start"].items()) + " |")
        lines += ["", "Noise-free sessions (evaluated sizes in MB):", ""]
        for key, runs in off["noise_free_runs"].items():
            for r in runs:
                lines.append(f"- {key}, start {r['start_mb']} MB: {r['evaluated_mb']}"
                             + (f"; prior: {r['prior_reason']}" if r["prior_reason"] else ""))
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="6 sizes, one pass, short samples (about 2 minutes)")
    parser.add_argument("--state-dir", default="/var/tmp/harmony-bench-bme-prior")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--mix", default="2Q6,2Q13",
                        help="a TPC-H mix, or 'lookup' for skewed lineitem key lookups")
    parser.add_argument("--sizes", help="comma-separated sizes in kB")
    parser.add_argument("--memory-limit-mb", type=int, default=0,
                        help="run the cluster in a memory cgroup of this many MB (0: none)")
    parser.add_argument("--warmup", type=float)
    parser.add_argument("--samples", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--passes", type=int)
    parser.add_argument("--budget", type=int, default=10, help="offline evaluations per replay")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--min-r2", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--from-json", help="reuse the measurements of an earlier report")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.sizes:
        args.sizes = [int(s) * KB for s in args.sizes.split(",")]
    elif args.quick:
        args.sizes = [128 * KB, 16 * MB, 64 * MB, 192 * MB, 384 * MB, 512 * MB]
    else:
        # past the knee: sequential scans of a table larger than shared_buffers/4 go through
        # a ring buffer, so lineitem (~90 MB at SF 0.1) misses until about 4x its size
        args.sizes = [128 * KB, 16 * MB, 48 * MB, 96 * MB, 192 * MB, 288 * MB, 384 * MB,
                      512 * MB]
    args.warmup = args.warmup if args.warmup is not None else (4.0 if args.quick else 8.0)
    args.samples = args.samples or (2 if args.quick else 3)
    args.seconds = args.seconds or (3.0 if args.quick else 5.0)
    args.passes = args.passes or (1 if args.quick else 2)
    machine = _machine()
    started = time.monotonic()
    stem = "bme_prior" + ("_lookup" if args.mix == "lookup" else "") \
        + (".quick" if args.quick else "")
    if args.from_json:
        earlier = json.loads(Path(args.from_json).read_text())
        measured, machine = earlier["measured"], earlier["machine"]
        measure_seconds = earlier["measure_seconds"]
    else:
        measured = run_measurements(args)
        measure_seconds = time.monotonic() - started
        # keep the measurements before the (slower) analysis: --from-json can redo it
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{stem}.json").write_text(json.dumps(
            {"machine": machine, "measure_seconds": measure_seconds, "measured": measured,
             "analysis": None}, indent=2, default=str) + "\n")
    starts = [32, 128, 256] if not args.quick else [128]
    analysis = analyse(measured, budget=args.budget, seeds=args.seeds, starts_mb=starts,
                       min_r2=args.min_r2)
    command = "python -m benchmarks.bme_prior" + (" --quick" if args.quick else "")
    if args.mix != "2Q6,2Q13":
        command += f" --mix {args.mix}"
    if args.memory_limit_mb:
        command += f" --memory-limit-mb {args.memory_limit_mb}"
    report = {"machine": machine, "command": command, "measure_seconds": measure_seconds,
              "load_average_end": list(os.getloadavg()), "measured": measured,
              "analysis": analysis}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (RESULTS / f"{stem}.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
