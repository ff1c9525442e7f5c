"""Duet benchmarking of a whole-server comparison (issue 45 item 4): two clusters on the same
data run side by side at the same moments, and the per-second tps ratio cancels the machine's
shared drift (Bulej et al., "Duet Benchmarking", ICPE 2020), against interleaved windows on one
cluster over the same wall-clock seconds.

Workload: pgbench select-only (``-S``), ``CLIENTS`` clients per cluster, scale ``SCALE``
(~90 MB: fits in shared_buffers 128MB, not in 16MB; the OS page cache holds it either way).
The second cluster is a copy of the first's data directory, so both hold the same bytes.

1. **A/A duet**: both clusters at 128MB in ``segments`` segments; between segments both restart
   and the roles swap (cluster 1 is "A" in even segments, "B" in odd ones), so a fixed asymmetry
   between the clusters cancels in the mean. Per second log(tps_B / tps_A); batch means over
   ``BATCH_S`` s; the interval is Student's over batches, each segment centred on its own mean
   (the asymmetry is a fixed effect, reported apart).
2. **A/A windows**: one cluster, ``window_s`` windows alternating two identical configurations
   with a reload between, pairs in AB / BA order; t interval over per-pair log ratios.
3. **A/B duet and windows**: shared_buffers 16MB (A) vs 128MB (B), restarts between segments
   or windows.
4. **Interference**: rounds of solo cluster 1, solo cluster 2, duet (rotating order), each arm's
   duet tps over its solo tps; unpinned, and pinned (each cluster, its background processes and
   its pgbench on one CPU by ``taskset``), plus an A/A duet pinned.

The first ``WARMUP_S`` seconds after every start of pgbench are dropped. Run the whole thing
under ``flock /tmp/harmony-bench.lock nice``:
``python -m benchmarks.duet [--quick] [--tag T]``; writes
``benchmarks/results/duet[.quick][.T].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.evidence.common import header, load_average, machine, write_results
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.stats.paired import interval_from_logs, t_quantile
from workloads.pgbench import find_pgbench

logger = logging.getLogger(__name__)

CLIENTS, SCALE = 2, 6
WARMUP_S = 2
BATCH_S = 5
TARGET_HALF_WIDTH = 0.03
SMALL, DEFAULT = {"shared_buffers": "16MB"}, {"shared_buffers": "128MB"}
PROGRESS = re.compile(r"progress: ([\d.]+) s, ([\d.]+) tps")
#: pgbench ``--rate`` per cluster (0: unthrottled); ``--smoke`` sets it so that a check of the
#: code leaves the machine to others' timing runs
RATE = [0]


@dataclass(frozen=True)
class Estimate:
    """One design's ratio B/A with its 95 % interval; ``unit_sd`` is the sd of the log ratio per
    second (duet) or per window pair (windows); ``seconds_for_3pct`` extrapolates the wall-clock
    seconds to a ±3 % half-width as 1/sqrt(seconds)."""

    design: str
    seconds: float
    ratio: float
    low: float
    high: float
    half_width: float
    unit_sd: float
    unit: str
    n: int
    seconds_for_3pct: float
    asymmetry: float | None = None
    lag1: float | None = None
    segment_half_width: float | None = None
    uptime: str = ""


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _lag1(xs: Sequence[float]) -> float | None:
    """Lag-1 autocorrelation (None below 3 values)."""
    if len(xs) < 3:
        return None
    m = statistics.fmean(xs)
    den = math.fsum((x - m) ** 2 for x in xs)
    num = math.fsum((a - m) * (b - m) for a, b in zip(xs, xs[1:], strict=False))
    return num / den if den > 0 else None


# ---------------------------------------------------------------------------- clusters
class Duo:
    """Two clusters on the same data; configure, restart and pin them."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.clusters: list[LocalCluster] = []
        self.pgbench = str(find_pgbench())

    def create(self) -> None:
        first = LocalCluster(self.state / "c1", sync_initdb=False)
        first.start()
        with psycopg.connect(first.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE pgbench")
        subprocess.run([self.pgbench, "-i", "-q", "-s", str(SCALE), first.dsn_for("pgbench")],
                       check=True, capture_output=True)
        first.stop()
        second = LocalCluster(self.state / "c2", sync_initdb=False,
                              template_data_dir=first.data_dir)
        second.start()
        first.start()
        self.clusters = [first, second]

    def dsn(self, i: int) -> str:
        return self.clusters[i].dsn_for("pgbench")

    def configure(self, i: int, config: dict[str, str], *, restart: bool) -> None:
        """ALTER SYSTEM the settings, then restart (or reload) cluster ``i``."""
        with psycopg.connect(self.clusters[i].dsn, autocommit=True) as conn:
            for name, value in config.items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(name), sql.Literal(value)))
            if not restart:
                conn.execute("SELECT pg_reload_conf()")
        if restart:
            self.clusters[i].restart()

    def pin(self, i: int, cpu: str) -> None:
        """Set the CPU affinity of cluster ``i``'s postmaster and its children (new backends
        inherit the postmaster's)."""
        pid = int((self.clusters[i].data_dir / "postmaster.pid").read_text().split()[0])
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for p in [str(pid), *children]:
            subprocess.run(["taskset", "-a", "-p", "-c", cpu, p], check=False,
                           capture_output=True)

    def stop(self) -> None:
        for c in self.clusters:
            c.stop()


def _start_pgbench(duo: Duo, i: int, seconds: int, cpu: str | None) -> subprocess.Popen[str]:
    argv = [duo.pgbench, "-S", "-n", "-c", str(CLIENTS), "-j", str(CLIENTS), "-T", str(seconds),
            "-P", "1", "--progress-timestamp", duo.dsn(i)]
    if RATE[0]:
        argv[1:1] = ["--rate", str(RATE[0])]
    if cpu is not None:
        argv = ["taskset", "-c", cpu, *argv]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _progress(proc: subprocess.Popen[str]) -> list[tuple[float, float]]:
    """(epoch second, tps) per progress line, the warm-up dropped."""
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed (exit {proc.returncode}): {err.strip()[-500:]}")
    rows = [(float(m.group(1)), float(m.group(2))) for m in PROGRESS.finditer(err)]
    return rows[WARMUP_S:]


def run_together(duo: Duo, seconds: int, cpus: tuple[str, str] | None
                 ) -> tuple[list[float], list[float], float]:
    """pgbench on both clusters at once; their per-second tps paired by second, and the
    largest gap between paired progress timestamps (s)."""
    procs = [_start_pgbench(duo, i, seconds, cpus[i] if cpus else None) for i in (0, 1)]
    a, b = (_progress(p) for p in procs)
    n = min(len(a), len(b))
    skew = max((abs(a[k][0] - b[k][0]) for k in range(n)), default=0.0)
    return [t for _, t in a[:n]], [t for _, t in b[:n]], skew


def run_alone(duo: Duo, i: int, seconds: int, cpu: str | None) -> list[float]:
    return [t for _, t in _progress(_start_pgbench(duo, i, seconds, cpu))]


# ---------------------------------------------------------------------------- designs
def _pin_both(duo: Duo, cpus: tuple[str, str] | None) -> None:
    if cpus:
        for i in (0, 1):
            duo.pin(i, cpus[i])


def _segment_logs(segment: dict[str, Any]) -> list[float]:
    """Per-second log(tps_B / tps_A) of one duet segment."""
    pairs = zip(segment["cluster1_tps"], segment["cluster2_tps"], strict=True)
    flip = segment["cluster1_is"] == "B"
    return [math.log(x / y) if flip else math.log(y / x) for x, y in pairs if x > 0 and y > 0]


def duet_estimate(design: str, segments: list[dict[str, Any]], segment_s: int,
                  uptime: str) -> Estimate:
    """B/A from role-swapped segments: t over ``BATCH_S``-s batch means, each segment centred
    on its own mean (a fixed cluster asymmetry, reported apart, is not noise); the t interval
    over segment means (restart to restart) is the cross-check ``segment_half_width``."""
    logs = [_segment_logs(seg) for seg in segments]
    batches = [[statistics.fmean(x[k * BATCH_S:(k + 1) * BATCH_S])
                for k in range(len(x) // BATCH_S)] for x in logs]
    means = [statistics.fmean(x) for x in batches]
    centred = [v - m for x, m in zip(batches, means, strict=True) for v in x]
    n, count = len(centred), len(segments)
    df = n - count
    if df < 1:
        raise RuntimeError(f"a duet needs at least 2 batches of {BATCH_S} s in some segment")
    sd = math.sqrt(math.fsum(v * v for v in centred) / df)
    se = sd * math.sqrt(sum(1 / len(x) for x in batches)) / count
    mean = statistics.fmean(means)
    half = t_quantile(0.975, df) * se
    seconds = count * segment_s
    even = statistics.fmean(means[0::2])
    odd = statistics.fmean(means[1::2]) if count > 1 else even
    by_segment = interval_from_logs(means, level=0.95, method="t")
    per_second = [v for x in logs for v in x]
    return Estimate(design=design, seconds=seconds, ratio=math.exp(mean),
                    low=math.exp(mean - half), high=math.exp(mean + half), half_width=half,
                    unit_sd=statistics.stdev(per_second), unit="second", n=n,
                    seconds_for_3pct=seconds * (half / TARGET_HALF_WIDTH) ** 2,
                    asymmetry=math.exp((even - odd) / 2), lag1=_lag1(per_second),
                    segment_half_width=(0.5 * math.log(by_segment.high / by_segment.low)
                                        if by_segment else None),
                    uptime=uptime)


def duet(duo: Duo, design: str, a: dict[str, str], b: dict[str, str], *, segments: int,
         segment_s: int, cpus: tuple[str, str] | None = None) -> tuple[Estimate, dict[str, Any]]:
    """Duet over ``segments`` role-swapped segments; the estimate of B/A and the raw series."""
    before = _uptime()
    raw: list[dict[str, Any]] = []
    for s in range(segments):
        roles = (a, b) if s % 2 == 0 else (b, a)  # cluster 1 is A in even segments
        for i in (0, 1):
            duo.configure(i, roles[i], restart=True)
        _pin_both(duo, cpus)
        t1, t2, skew = run_together(duo, segment_s + WARMUP_S + 1, cpus)
        raw.append({"cluster1_tps": t1, "cluster2_tps": t2, "skew_s": skew,
                    "cluster1_is": "A" if s % 2 == 0 else "B"})
        logger.info("%s segment %d: B/A %.3f (load %s)", design, s + 1,
                    math.exp(statistics.fmean(_segment_logs(raw[-1]))), load_average())
    est = duet_estimate(design, raw, segment_s, before)
    return est, {"segments": raw}


def windows(duo: Duo, design: str, a: dict[str, str], b: dict[str, str], *, pairs: int,
            window_s: int, restart: bool) -> tuple[Estimate, dict[str, Any]]:
    """Interleaved windows on cluster 1 (cluster 2 idle): pairs AB, BA, ...; B/A per pair."""
    before = _uptime()
    logs: list[float] = []
    level: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(pairs):
        order = (("A", a), ("B", b)) if r % 2 == 0 else (("B", b), ("A", a))
        got: dict[str, float] = {}
        for label, config in order:
            duo.configure(0, config, restart=restart)
            got[label] = statistics.fmean(run_alone(duo, 0, window_s + WARMUP_S, None))
            level[label].append(math.log(got[label]))
        logs.append(math.log(got["B"] / got["A"]))
        logger.info("%s pair %d: B/A %.3f (load %s)", design, r + 1, math.exp(logs[-1]),
                    load_average())
    iv = interval_from_logs(logs, level=0.95, method="t")
    if iv is None:
        raise RuntimeError("windows need at least 2 pairs")
    half = 0.5 * math.log(iv.high / iv.low)
    seconds = 2 * pairs * window_s
    window_sd = math.sqrt(statistics.fmean([statistics.variance(v) for v in level.values()]))
    est = Estimate(design=design, seconds=seconds, ratio=iv.ratio, low=iv.low, high=iv.high,
                   half_width=half, unit_sd=statistics.stdev(logs), unit="pair", n=pairs,
                   seconds_for_3pct=seconds * (half / TARGET_HALF_WIDTH) ** 2,
                   lag1=_lag1(logs), uptime=before)
    return est, {"pair_log_ratios": logs, "window_log_tps": level,
                 "per_window_sd": window_sd}


def interference(duo: Duo, *, rounds: int, window_s: int,
                 cpus: tuple[str, str] | None) -> dict[str, Any]:
    """Each arm's duet tps over its solo tps in adjacent windows (both at 128MB)."""
    for i in (0, 1):
        duo.configure(i, DEFAULT, restart=True)
    _pin_both(duo, cpus)
    before = _uptime()
    rows: list[dict[str, float]] = []
    for r in range(rounds):
        got: dict[str, float] = {}
        steps = ["solo1", "solo2", "duet"]
        for step in steps[r % 3:] + steps[:r % 3]:
            if step == "duet":
                t1, t2, _ = run_together(duo, window_s + WARMUP_S, cpus)
                got["duet1"], got["duet2"] = statistics.fmean(t1), statistics.fmean(t2)
            else:
                i = int(step[-1]) - 1
                got[step] = statistics.fmean(run_alone(duo, i, window_s + WARMUP_S,
                                                       cpus[i] if cpus else None))
        rows.append(got)
        logger.info("interference round %d %s: %s (load %s)", r + 1,
                    "pinned" if cpus else "unpinned", {k: round(v) for k, v in got.items()},
                    load_average())

    def geo(key: str, over: str) -> float:
        return math.exp(statistics.fmean([math.log(g[key] / g[over]) for g in rows]))

    return {"pinned": cpus is not None, "rounds": rows, "window_s": window_s,
            "cluster1_duet_over_solo": geo("duet1", "solo1"),
            "cluster2_duet_over_solo": geo("duet2", "solo2"),
            "solo2_over_solo1": geo("solo2", "solo1"),
            "duet_total_over_solo_mean": math.exp(statistics.fmean(
                [math.log(2 * (g["duet1"] + g["duet2"]) / (g["solo1"] + g["solo2"]))
                 for g in rows])),
            "uptime_before": before, "uptime_after": _uptime()}


# ---------------------------------------------------------------------------- report
def _markdown(data: dict[str, Any], command: str) -> str:
    lines = [header("Duet vs interleaved windows for a whole-server comparison", command,
                    data["machine"], f"\npgbench -S, {CLIENTS} clients per cluster, scale "
                    f"{SCALE}; A = shared_buffers 16MB, B = 128MB (A/A: both 128MB); first "
                    f"{WARMUP_S} s after each pgbench start dropped; duet interval: t over "
                    f"{BATCH_S}-s batch means, segments centred (roles swap and both restart "
                    "between segments); by segment: t over segment means.\n"),
             "| design | seconds | B/A | 95 % interval | half-width | sd of log ratio "
             "| n | s to ±3 % | by segment | cluster asym. | lag-1 | load at start |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in data["estimates"]:
        asym = "–" if e["asymmetry"] is None else f"{e['asymmetry']:.3f}"
        lag = "–" if e["lag1"] is None else f"{e['lag1']:.2f}"
        seg = e.get("segment_half_width")
        by_seg = "–" if seg is None else f"±{100 * seg:.1f} %"
        load = e["uptime"].split("load average:")[-1].strip()
        lines.append(f"| {e['design']} | {e['seconds']:.0f} | {e['ratio']:.3f} | "
                     f"{e['low']:.3f}–{e['high']:.3f} | ±{100 * e['half_width']:.1f} % | "
                     f"{100 * e['unit_sd']:.1f} % per {e['unit']} | "
                     f"{e['n']} {'batches' if e['unit'] == 'second' else 'pairs'} | "
                     f"{e['seconds_for_3pct']:.0f} | {by_seg} | {asym} | {lag} | {load} |")
    lines += ["", "Per-window sd of log tps (windows, within a configuration): "
              + ", ".join(f"{k} {100 * v:.1f} %" for k, v in data["per_window_sd"].items()), "",
              "## Interference (both at 128MB; geometric means over rounds)\n",
              "| | cluster 1 duet/solo | cluster 2 duet/solo | solo 2 / solo 1 "
              "| duet total / mean solo | load |", "|---|---|---|---|---|---|"]
    for f in data["interference"]:
        load = f["uptime_before"].split("load average:")[-1].strip()
        lines.append(f"| {'pinned (taskset)' if f['pinned'] else 'unpinned'} | "
                     f"{f['cluster1_duet_over_solo']:.3f} | {f['cluster2_duet_over_solo']:.3f} | "
                     f"{f['solo2_over_solo1']:.3f} | {f['duet_total_over_solo_mean']:.3f} | "
                     f"{load} |")
    lines += ["", f"Uptime after: {data['uptime_after']}"]
    return "\n".join(lines)


def reanalyse(path: Path) -> int:
    """Recompute the duet estimates of a measured run from its per-second series."""
    data = json.loads(path.read_text())
    for i, e in enumerate(data["estimates"]):
        segments = data["raw"][e["design"]].get("segments")
        if segments:
            data["estimates"][i] = asdict(duet_estimate(
                e["design"], segments, int(e["seconds"]) // len(segments), e["uptime"]))
    write_results(path.name.removesuffix(".json"), data, _markdown(data, data["command"]),
                  out=path.parent)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.duet")
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    parser.add_argument("--tag", default="")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="re-analyse the duet designs of a measured run and rewrite its files")
    parser.add_argument("--smoke", action="store_true",
                        help="with --quick: pgbench throttled to 50 tps, results under .smoke")
    args = parser.parse_args(argv)
    RATE[0] = 50 if args.smoke else 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.from_json is not None:
        return reanalyse(args.from_json)
    seg_s, segments, win_s, pairs, rounds = (15, 2, 5, 2, 1) if args.quick else (25, 4, 10, 5, 3)
    command = "flock /tmp/harmony-bench.lock nice python -m benchmarks.duet " + \
        " ".join(argv if argv is not None else sys.argv[1:])
    data: dict[str, Any] = {"machine": machine(), "command": command, "clients": CLIENTS,
                            "scale": SCALE, "warmup_s": WARMUP_S, "batch_s": BATCH_S}
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-duet-", dir="/tmp"))
    duo = Duo(state)
    started = time.monotonic()
    estimates: list[Estimate] = []
    raw: dict[str, Any] = {}
    try:
        duo.create()
        for design, a, b, how in (("A/A duet", DEFAULT, DEFAULT, "duet"),
                                  ("A/A windows (reload)", DEFAULT, DEFAULT, "reload"),
                                  ("A/B duet", SMALL, DEFAULT, "duet"),
                                  ("A/B windows (restart)", SMALL, DEFAULT, "restart")):
            if how == "duet":
                est, got = duet(duo, design, a, b, segments=segments, segment_s=seg_s)
            else:
                duo.configure(1, DEFAULT, restart=True)  # cluster 2 idle at the default
                est, got = windows(duo, design, a, b, pairs=pairs, window_s=win_s,
                                   restart=how == "restart")
            estimates.append(est)
            raw[design] = got
        data["interference"] = [interference(duo, rounds=rounds, window_s=win_s, cpus=None)]
        pinned = ("0", "1")
        est, got = duet(duo, "A/A duet pinned", DEFAULT, DEFAULT, segments=segments,
                        segment_s=seg_s, cpus=pinned)
        estimates.append(est)
        raw[est.design] = got
        data["interference"].append(interference(duo, rounds=rounds, window_s=win_s,
                                                 cpus=pinned))
    finally:
        duo.stop()
        shutil.rmtree(state, ignore_errors=True)
    data["estimates"] = [asdict(e) for e in estimates]
    data["per_window_sd"] = {k: v["per_window_sd"] for k, v in raw.items()
                             if "per_window_sd" in v}
    data["raw"] = raw
    data["elapsed_s"] = time.monotonic() - started
    data["uptime_after"] = _uptime()
    suffixes = [".quick" * args.quick, ".smoke" * args.smoke, f".{args.tag}" * bool(args.tag)]
    name = "duet" + "".join(suffixes)
    jpath, mpath = write_results(name, data, _markdown(data, command))
    logger.info("wrote %s and %s", jpath, mpath)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
