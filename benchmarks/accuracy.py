"""Accuracy: do the switchback and per-transaction estimates read the throughput ratio the
workload's own client counts? (issue 45, item 3)

A workload the tuner did not create: a private cluster, a 600,000-row table made here, and
four weighted statements in a ``.sql`` file configured as a user's scripted workload (a point
lookup, a small range aggregate, an account range whose plan depends on random_page_cost, and
a 90,000-row ``DISTINCT … ORDER BY`` that spills at work_mem 4MB), 4 clients. The pair:
the original (defaults) against work_mem 128MB, random_page_cost 1,
max_parallel_workers_per_gather 0.

1. **Truth**: pgbench running the same statements with the same weights (``-f file@weight``,
   ``-M prepared``, a fresh pgbench per round), ``--rounds`` interleaved rounds (AB, BA, ...)
   of ``--round-s`` seconds, ALTER SYSTEM + reload between; per round the tps ratio, a 95 %
   t interval over the rounds' log ratios.
2. **Switchback**, the product's path (:func:`tuner_client.switchback.run_driven` with the
   driver of :func:`make_assignment`, then ``totals_from_transactions`` + ``race``, as the
   final race's ``_driven`` does), once with the driver as it was (``-M prepared``) and once
   as it is now (``-M extended``); each trace analysed with straddlers dropped (the old rule)
   and carried (the new one), and with a settle margin as long as the longest template.
3. **Per transaction** on the session-settable part of the pair (work_mem + random_page_cost;
   parallel workers left at the server's 2 in both arms), against its own pgbench truth.

Run: ``flock /tmp/harmony-bench.lock nice .venv/bin/python -m benchmarks.accuracy [--quick]
[--tag T]``; writes ``benchmarks/results/accuracy[.quick][.T].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from benchmarks.evidence.common import header, machine, write_results
from benchmarks.evidence.restart import uptime
from tuner_client.config import tuner_config_from_dict
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.stats import per_transaction
from tuner_client.stats.paired import RatioInterval, interval_from_logs
from tuner_client.stats.switchback import SwitchbackRace, race, totals_from_transactions
from tuner_client.switchback import ConfigurationSwitch, DrivenRun, run_driven, settle_margin
from workloads.per_transaction.from_config import make_assignment
from workloads.pgbench import find_pgbench
from workloads.scripted import load_scripts

logger = logging.getLogger(__name__)

ROWS = 600_000
CLIENTS = 4
#: the long statement per ``--mix``: ``sort`` reads 600,000 rows for the 90,000 it sorts;
#: ``range`` takes them by an account range the planner reads with a bitmap scan at
#: random_page_cost 4 and an index scan at 1 (slower here: the rows are scattered)
LONG = {
    "sort": "SELECT DISTINCT label, pad, account FROM events WHERE amount < 21.4 "
            "ORDER BY label, account;",
    "range": "SELECT DISTINCT label, pad, account FROM events WHERE account BETWEEN 5000 AND "
             "8000 ORDER BY label, account;",
}
MIX_SQL = """\
-- The user's workload: four statements, weighted, on tables the tuner did not create.
-- @weight 60
-- @param id = random(1, 600000)
SELECT label, amount FROM events WHERE id = :id;
-- @weight 25
-- @param lo = random(1, 598000)
SELECT count(*), sum(amount) FROM events WHERE id BETWEEN :lo AND :lo + 2000;
-- @weight 12
-- @param acc = random(0, 19950)
SELECT sum(amount) FROM events WHERE account BETWEEN :acc AND :acc + 40;
-- @weight 3
{long}
"""
ORIGINAL = {"work_mem": "4MB", "random_page_cost": "4", "max_parallel_workers_per_gather": "2"}
CANDIDATE = {"work_mem": "128MB", "random_page_cost": "1", "max_parallel_workers_per_gather": "0"}
SESSION_KNOBS = ("work_mem", "random_page_cost")
_TPS = re.compile(r"tps = ([\d.]+) \(without initial connection time\)")
_LATENCY = re.compile(r"latency average = ([\d.]+) ms")


def _load(cluster: LocalCluster) -> str:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE accuracy")
    dsn = cluster.dsn_for("accuracy")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE events AS SELECT g AS id,
            ((g::bigint * 7919) % 20000)::int AS account,
            md5(g::text) || md5((g * 3)::text) AS label, (g % 1000)::numeric / 7 AS amount,
            repeat('x', 60) AS pad FROM generate_series(1, {ROWS}) g""")
        conn.execute("ALTER TABLE events ADD PRIMARY KEY (id)")
        conn.execute("CREATE INDEX ON events (account)")
        conn.execute("VACUUM ANALYZE events")
        conn.execute("CHECKPOINT")  # the load's dirty pages written before anything is timed
    return dsn


def plan_after_reload(dsn: str, statement: str, configs: list[dict[str, str]]
                      ) -> dict[str, Any]:
    """Whether a prepared statement's plan follows a reload: EXPLAIN EXECUTE under the first
    configuration, then under the second after ALTER SYSTEM + reload, and of a fresh PREPARE."""
    with psycopg.connect(dsn, autocommit=True) as conn, \
            ConfigurationSwitch(conn, KnobCatalog.from_connection(conn), configs) as switch, \
            psycopg.connect(dsn, autocommit=True) as session:
        def plan(name: str) -> list[str]:
            rows = session.execute(f"EXPLAIN EXECUTE {name}").fetchall()
            return [str(r[0]).strip() for r in rows]

        switch.apply(0)
        session.execute(f"PREPARE kept AS {statement.rstrip(';')}")
        for _ in range(6):  # past the custom plans of a parameterized statement
            session.execute("EXECUTE kept").fetchall()
        before = plan("kept")
        switch.apply(1)
        session.execute("SELECT 1")  # the reload is taken between commands
        session.execute(f"PREPARE fresh AS {statement.rstrip(';')}")
        return {"statement": statement, "under_first": before, "kept_after_reload": plan("kept"),
                "fresh_after_reload": plan("fresh")}


def _iv(iv: RatioInterval | None) -> dict[str, Any] | None:
    if iv is None:
        return None
    return {"ratio": iv.ratio, "low": iv.low, "high": iv.high if math.isfinite(iv.high) else None,
            "n": iv.n, "level": iv.level, "method": iv.method}


def _text(iv: Mapping[str, Any] | None) -> str:
    if iv is None:
        return "n/a"
    high = f"{iv['high']:.2f}" if iv["high"] is not None else "∞"
    return f"{iv['ratio']:.2f}× ({iv['low']:.2f}–{high})"


#: the first round's pgbench ``--random-seed`` in a truth: both arms of round r draw with
#: ``TRUTH_SEED + r``, so that each client draws the same scripts and parameters in the same
#: order under either configuration (common random numbers). On a mix with a rare long
#: statement a round's count moves with how many of them it drew; drawn alike, that spread
#: cancels in the round's ratio (the duet's clients share a seed the same way:
#: ``benchmarks/results/duet_seeds.s28.md``)
TRUTH_SEED = 7001


def seeded(seed: int | None) -> list[str]:
    """pgbench's ``--random-seed`` option for ``seed`` (none: pgbench's own, from the time)."""
    return [] if seed is None else [f"--random-seed={seed}"]


class Pgbench:
    """The user's scripts in a pgbench of their own (fresh connections), for the truth."""

    def __init__(self, dsn: str, files: Sequence[str], directory: Path, *,
                 clients: int = CLIENTS, writes: bool = False,
                 variables: Mapping[str, str] | None = None) -> None:
        self.dsn, self.clients, self.writes = dsn, clients, writes
        self.specs: list[str] = [f"-D{k}={v}" for k, v in (variables or {}).items()]
        for i, script in enumerate(load_scripts(files)):
            path = directory / f"s{i}.pgbench"
            path.write_text(script.text)
            self.specs += ["-f", f"{path}@{script.weight}"]

    def tps(self, seconds: int, seed: int | None = None) -> tuple[float, list[float | None]]:
        """The run's tps and each script's mean latency (ms, pgbench ``-r``); ``seed``:
        pgbench's ``--random-seed`` (:data:`TRUTH_SEED`)."""
        done = subprocess.run(
            [str(find_pgbench()), "-n", "-M", "prepared", "-r", *seeded(seed), *self.specs, "-c",
             str(self.clients), "-j", "2", "-T", str(seconds), self.dsn], capture_output=True,
            text=True, check=False,
            env={**os.environ, **({} if self.writes else
                                  {"PGOPTIONS": "-c default_transaction_read_only=on"})})
        found = _TPS.search(done.stdout)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"pgbench failed: {done.stderr[-2000:]}")
        latencies: list[float | None] = []
        for section in done.stdout.split("SQL script ")[1:]:
            latency = _LATENCY.search(section)
            latencies.append(float(latency.group(1)) if latency else None)
        return float(found.group(1)), latencies


def truth(dsn: str, bench: Pgbench, configs: list[dict[str, str]], *, rounds: int,
          round_s: int, warmup_s: int = 10) -> dict[str, Any]:
    """Interleaved pgbench rounds (AB, BA, ...) with ALTER SYSTEM + reload between, both
    arms of a round drawing with one seed (:data:`TRUTH_SEED`)."""
    before = uptime()
    rows: list[dict[str, Any]] = []
    with psycopg.connect(dsn, autocommit=True) as conn, \
            ConfigurationSwitch(conn, KnobCatalog.from_connection(conn), configs) as switch:
        for k in (0, 1):  # warm-up, not counted
            switch.apply(k)
            bench.tps(warmup_s)
        for r in range(rounds):
            tps = [0.0, 0.0]
            latency: list[list[float | None]] = [[], []]
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                switch.apply(k)
                tps[k], latency[k] = bench.tps(round_s, seed=TRUTH_SEED + r)
            rows.append({"round": r, "tps_original": tps[0], "tps_candidate": tps[1],
                         "ratio": tps[1] / tps[0], "script_latency_ms": latency})
            logger.info("truth round %d: %.1f vs %.1f tps: %.3f×", r, tps[0], tps[1],
                        tps[1] / tps[0])
    logs = [math.log(row["ratio"]) for row in rows]
    return {"configs": configs, "rounds": rows, "round_s": round_s,
            "interval": _iv(interval_from_logs(logs, level=0.95, method="t")),
            "uptime_before": before, "uptime_after": uptime()}


def _race(run: DrivenRun, keep: np.ndarray, settle_s: float, slice_s: float) -> SwitchbackRace:
    trace = run.trace
    totals = totals_from_transactions(list(run.spans), trace.template[keep],
                                      (trace.origin + trace.start)[keep], trace.latency[keep],
                                      trace.ok[keep], settle_s=settle_s)
    return race(totals, ["original", "candidate"], slice_s=slice_s, settle_s=settle_s)


def analyse(run: DrivenRun, slice_s: float) -> dict[str, Any]:
    """One trace three ways: straddlers dropped (the old rule), carried (the new one), and
    carried with a settle margin as long as the longest template's mean latency."""
    trace, spans = run.trace, list(run.spans)
    start = trace.origin + trace.start
    begins = np.array([s.begin for s in spans])
    ends = np.array([s.end for s in spans])
    where = np.searchsorted(begins, start, side="right") - 1
    safe = np.clip(where, 0, None)
    settle = settle_margin(slice_s)
    inside = (where >= 0) & (start < ends[safe]) & (start >= begins[safe] + settle)
    straddle = inside & (start + trace.latency > ends[safe])
    arm = np.array([s.config for s in spans])[safe]
    names = [t.rsplit(":", 1)[-1] for t in trace.templates]
    per_arm: dict[str, Any] = {}
    for k, label in enumerate(("original", "candidate")):
        mine = inside & (arm == k)
        per_arm[label] = {
            "started": int(mine.sum()), "straddling": int((straddle & mine).sum()),
            "straddle_fraction": float((straddle & mine).sum() / max(1, mine.sum())),
            "by_template": {
                f"line {names[t]}": {
                    "started": int((mine & (trace.template == t)).sum()),
                    "straddle_fraction": float((straddle & mine & (trace.template == t)).sum()
                                               / max(1, (mine & (trace.template == t)).sum())),
                    "mean_latency_s": float(trace.latency[mine & (trace.template == t)].mean())
                    if (mine & (trace.template == t)).any() else None}
                for t in range(len(names))}}
    first_block = inside & (np.array([s.block for s in spans])[safe] == 0)
    longest = max(float(trace.latency[first_block & (trace.template == t)].mean())
                  for t in range(len(names)) if (first_block & (trace.template == t)).any())
    # the count inside the switchback: transactions started per second of each slice (after
    # its settle margin), per block candidate over original
    rate: dict[int, dict[int, float]] = {}
    for i, span in enumerate(spans):
        n = int((inside & (where == i)).sum())
        rate.setdefault(span.block, {})[span.config] = n / (span.end - span.begin - settle)
    count_logs = [math.log(r[1] / r[0]) for r in rate.values() if r.get(0) and r.get(1)]
    all_rows = np.ones(len(trace), dtype=bool)
    ways = {"dropped (old rule)": _race(run, ~straddle, settle, slice_s),
            "carried (new rule)": _race(run, all_rows, settle, slice_s)}
    long_settle = max(settle, longest)
    if long_settle < slice_s:
        ways[f"carried, settle {long_settle:.2f} s"] = _race(run, all_rows, long_settle, slice_s)
    # the interference of carried work, measured: leave out what starts in a slice while a
    # transaction carried from the previous one still runs (a start-time rule: no length bias)
    carried_until = np.full(len(spans), -np.inf)
    ok_carried = (where >= 0) & (start < ends[safe]) & (start + trace.latency > ends[safe])
    for i in np.unique(safe[ok_carried]):
        if i + 1 < len(spans):
            mine = ok_carried & (safe == i)
            carried_until[i + 1] = float((start + trace.latency)[mine].max())
    clean = ~((where >= 0) & (start < carried_until[safe]))
    ways["carried, next slice's starts under carried work left out"] = _race(
        run, clean, settle, slice_s)
    return {"slice_s": slice_s, "settle_s": settle, "blocks": len(spans) // 2,
            "transactions": len(trace), "switch_ms": run.switch_ms, "per_arm": per_arm,
            "longest_template_mean_s_first_block": longest,
            "count_ratio_t": _iv(interval_from_logs(count_logs, level=0.95, method="t")),
            "estimates": {way: {"interval": _iv(r.plain["candidate"].interval),
                                "dropped": dict(r.dropped), "carried": r.carried,
                                "kept": r.kept} for way, r in ways.items()}}


def switchback(dsn: str, wl: Any, configs: list[dict[str, str]], *, blocks: int,
               slice_s: float, seed: int, query_mode: str,
               keep_trace: Path | None = None) -> dict[str, Any]:
    """The final race's driven switchback on the user's workload."""
    before = uptime()
    driver = make_assignment(wl, dsn, [{}], seed=seed, query_mode=query_mode)
    with psycopg.connect(dsn, autocommit=True) as conn:
        run = run_driven(conn, KnobCatalog.from_connection(conn), configs, driver,
                         blocks=blocks, slice_s=slice_s, seed=seed)
    out = analyse(run, slice_s)
    if keep_trace is not None:  # for a re-analysis (not committed: a few MB)
        trace = run.trace
        np.savez_compressed(keep_trace, spans=np.array([(s.block, s.config, s.begin, s.end)
                                                        for s in run.spans]),
                            template=trace.template, start=trace.origin + trace.start,
                            latency=trace.latency, ok=trace.ok)
        out["trace_file"] = str(keep_trace)
    out.update({"query_mode": query_mode, "uptime_before": before, "uptime_after": uptime()})
    for way, est in out["estimates"].items():
        logger.info("switchback -M %s, %s: %s", query_mode, way, _text(est["interval"]))
    return out


def per_transaction_run(dsn: str, wl: Any, configs: list[dict[str, str]], *, seconds: int,
                        seed: int) -> dict[str, Any]:
    """The per-transaction design on a session-settable pair (SET LOCAL per transaction)."""
    before = uptime()
    trace = make_assignment(wl, dsn, configs, seed=seed).run(seconds)
    result = per_transaction.compare(trace, 0, 1, level=0.95, seed=seed)
    logger.info("per transaction: %s", result.interval)
    return {"configs": configs, "seconds": seconds, "transactions": len(trace),
            "interval": _iv(result.interval), "anytime": _iv(result.anytime),
            "templates": {trace.templates[t.template].rsplit(":", 1)[-1]: {
                "n": [t.n_reference, t.n_candidate], "speedup": t.speedup, "weight": t.weight,
                "mean_ms": [1e3 * t.mean_reference_s, 1e3 * t.mean_candidate_s]}
                for t in result.templates},
            "uptime_before": before, "uptime_after": uptime()}


def markdown(data: dict[str, Any], command: str) -> str:
    full, session = data["truth"], data.get("truth_session")
    lines = [header("Accuracy: the estimate against the workload's own count (issue 45, "
                    "item 3)", command, data["machine"]),
             "", f"Pair: {ORIGINAL} → {CANDIDATE}; 4 clients, the four statements of "
             f"`benchmarks/accuracy.py`, mix `{data['args']['mix']}` (weights 60/25/12/3; the "
             f"long one: `{LONG[data['args']['mix']]}`). Ratios: candidate over original "
             f"(above 1: faster). Intervals at 95 % (pgbench: t over rounds; switchback: the "
             f"product's anytime-valid sequence over blocks; per transaction: its bootstrap).",
             "", "| estimate | ratio (95 %) | straddling, original / candidate |",
             "|---|---|---|",
             f"| truth: pgbench, {len(full['rounds'])} rounds of {full['round_s']} s | "
             f"{_text(full['interval'])} | – |"]
    for run in data["switchbacks"]:
        arms = run["per_arm"]
        frac = (f"{100 * arms['original']['straddle_fraction']:.2f} % / "
                f"{100 * arms['candidate']['straddle_fraction']:.2f} %")
        for way, est in run["estimates"].items():
            lines.append(f"| switchback -M {run['query_mode']}, {run['blocks']} blocks of "
                         f"{run['slice_s']:g} s, straddlers {way} | {_text(est['interval'])} | "
                         f"{frac} |")
        lines.append(f"| (same run: transactions started per second, t over blocks) | "
                     f"{_text(run['count_ratio_t'])} | – |")
    if session is not None:
        lines += [f"| truth, session pair only (work_mem + random_page_cost): pgbench | "
                  f"{_text(session['interval'])} | – |",
                  f"| per transaction, session pair, {data['per_transaction']['seconds']} s | "
                  f"{_text(data['per_transaction']['interval'])} | – |"]
    lines += ["", "Truth rounds (tps original → candidate): " + "; ".join(
        f"{r['tps_original']:.1f}→{r['tps_candidate']:.1f}" for r in full["rounds"])]
    for run in data["switchbacks"]:
        lines += ["", f"Switchback -M {run['query_mode']}: {run['transactions']:,} "
                  f"transactions, longest template's mean latency in the first block "
                  f"{run['longest_template_mean_s_first_block']:.3f} s; per template "
                  f"(started after the settle margin, straddling, mean latency):"]
        for label, arm in run["per_arm"].items():
            lines.append(f"- {label}: " + "; ".join(
                f"{t} {v['started']}, {100 * v['straddle_fraction']:.1f} %, "
                f"{(v['mean_latency_s'] or 0) * 1e3:.1f} ms"
                for t, v in arm["by_template"].items()))
        lines.append("- uptime: " + run["uptime_before"] + " / " + run["uptime_after"])
    plans = data.get("plan_after_reload")
    if plans:
        def shape(plan: list[str]) -> str:
            return "; ".join(line.split("  (cost")[0] for line in plan
                             if "Scan" in line or "Gather" in line or "Workers" in line)

        lines += ["", f"A prepared statement across a reload (`{plans['statement']}`): under the "
                  f"original `{shape(plans['under_first'])}`; the same prepared statement after "
                  f"the reload to the candidate `{shape(plans['kept_after_reload'])}`; prepared "
                  f"afresh `{shape(plans['fresh_after_reload'])}`."]
    lines += ["", "Uptime before the truth rounds: " + full["uptime_before"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.accuracy")
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--tag", default="")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--slice-s", type=float, default=3.0)
    parser.add_argument("--mix", choices=sorted(LONG), default="sort",
                        help="the long statement (see LONG)")
    parser.add_argument("--modes", nargs="+", default=["prepared", "extended"],
                        help="pgbench query modes of the switchback driver")
    parser.add_argument("--pertx-s", type=int, default=120, help="0: skip the per-transaction "
                        "part and its truth")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.round_s, args.blocks, args.pertx_s = 2, 5, 4, 20
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    name = "accuracy" + (".quick" if args.quick else "") + (f".{args.tag}" if args.tag else "")
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-accuracy-", dir="/tmp"))
    cluster = LocalCluster(state / "cluster", sync_initdb=False)
    mix_sql = MIX_SQL.format(long=LONG[args.mix])
    data: dict[str, Any] = {"machine": machine(), "args": vars(args), "mix_sql": mix_sql}
    try:
        cluster.start()
        dsn = _load(cluster)
        mix = state / "mix.sql"
        mix.write_text(mix_sql)
        cfg = tuner_config_from_dict({"name": "accuracy", "seed": args.seed,
                                      "workload": {"scripts": {"files": [str(mix)],
                                                               "clients": CLIENTS}},
                                      "measure": {"design": "per-transaction",
                                                  "slice_s": args.slice_s}})
        bench = Pgbench(dsn, cfg.workload.files, state)
        configs = [dict(ORIGINAL), dict(CANDIDATE)]
        data["plan_after_reload"] = plan_after_reload(dsn, LONG[args.mix], configs)
        data["truth"] = truth(dsn, bench, configs, rounds=args.rounds, round_s=args.round_s)
        data["switchbacks"] = [
            switchback(dsn, cfg.workload, configs, blocks=args.blocks, slice_s=args.slice_s,
                       seed=args.seed, query_mode=mode,
                       keep_trace=Path(tempfile.gettempdir()) / f"harmony-{name}-{mode}.npz")
            for mode in args.modes]
        if args.pertx_s:
            pair = [{n: c[n] for n in SESSION_KNOBS} for c in configs]
            data["per_transaction"] = per_transaction_run(dsn, cfg.workload, pair,
                                                          seconds=args.pertx_s, seed=args.seed)
            data["truth_session"] = truth(dsn, bench, pair, rounds=args.rounds,
                                          round_s=args.round_s)
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    command = "python -m benchmarks.accuracy " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    jpath, mpath = write_results(name, data, markdown(data, command))
    print(f"wrote {jpath} and {mpath}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
