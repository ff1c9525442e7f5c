"""Common random numbers in a duet (issue 51: the A/A of server-wide knobs ends at ±10 %).

A duet runs the workload's client against the server and its clone at the same seconds.
pgbench seeds its random generators from the clock by default, so the two clients draw
different statements: on a ``.sql`` mix whose heavy statement has 3 % of the weight, a 5-s
batch counts far fewer transactions when it draws more heavy ones, and the two clusters draw
them independently. With one ``--random-seed`` for both clients of a segment (a new one per
segment) each client runs the same sequence of statements and parameters on both clusters:
the draws cancel in the ratio, as long as neither runs far ahead of the other.

This measures the per-batch spread of the paired log-ratios (5-s batch means, as the duet's
intervals use) on the A/A (the same configuration on both clusters) and on a real effect
(work_mem 128MB, random_page_cost 1 and no parallel workers on the candidate), with
independent seeds and with a common seed per segment, the four modes interleaved segment by
segment on one server and its clone (:func:`tuner_client.duet.clone.make_clone`), roles
swapped every other segment.

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.duet_seeds --segments 6 \
        --tag T

Writes benchmarks/results/duet_seeds.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.accuracy import CANDIDATE, CLIENTS, LONG, MIX_SQL, ORIGINAL, _load
from benchmarks.evidence.common import machine, write_results
from benchmarks.evidence.restart import uptime
from benchmarks.memory_knobs import alter_system
from tuner_client.duet.clone import make_clone
from tuner_client.duet.driver import run_together
from tuner_client.duet.stats import BATCH_S
from tuner_client.servers.local_cluster import LocalCluster
from workloads.scripted import ScriptedWorkload

logger = logging.getLogger(__name__)

#: (mode, the candidate's settings, whether the segment's clients share one seed)
MODES = [("A/A, own seeds", ORIGINAL, False), ("A/A, common seed", ORIGINAL, True),
         ("effect, own seeds", CANDIDATE, False), ("effect, common seed", CANDIDATE, True)]


def batches(logs: list[float]) -> list[float]:
    """The 5-s batch means of per-second log-ratios."""
    return [statistics.fmean(logs[k * BATCH_S:(k + 1) * BATCH_S])
            for k in range(len(logs) // BATCH_S)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.duet_seeds")
    parser.add_argument("--segments", type=int, default=6, help="segments per mode")
    parser.add_argument("--segment-s", type=int, default=20)
    parser.add_argument("--tag", default="run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-duet-seeds-", dir="/var/tmp"))
    state.chmod(0o755)
    cluster = LocalCluster(state / "cluster", sync_initdb=False)
    data: dict[str, Any] = {"machine": machine(), "args": vars(args), "uptime_start": uptime(),
                            "segments": []}
    started = time.monotonic()
    clone = None
    try:
        cluster.start()
        dsn = _load(cluster)
        alter_system(dsn, ORIGINAL)
        mix = state / "mix.sql"
        mix.write_text(MIX_SQL.format(long=LONG["range"]))
        clone = make_clone(dsn, journals=state / "journals", mark="duet-seeds",
                           parent=state / "clones")
        clone_dsn = clone.cluster.dsn_for("accuracy")
        workload = ScriptedWorkload(dsn, [str(mix)], clients=CLIENTS)
        workload.start()
        for k in range(args.segments * len(MODES)):
            mode, candidate, common = MODES[k % len(MODES)]
            on_clone = (k // len(MODES)) % 2 == 0
            alter_system(clone_dsn if on_clone else dsn, candidate)
            alter_system(dsn if on_clone else clone_dsn, ORIGINAL)
            seed = 1000 + k

            def command(target: str, seconds: int, seed: int = seed, common: bool = common
                        ) -> tuple[list[str], dict[str, str] | None]:
                argv, env = workload.progress_command(target, seconds)
                return ([argv[0], f"--random-seed={seed}", *argv[1:]] if common else argv), env

            paired = run_together(command, (dsn, clone_dsn), args.segment_s + 2, skip_s=2)
            logs = paired.log_ratios(1 if on_clone else 0)
            # the candidate over the reference, the clone's asymmetry not yet removed
            cut = batches(logs)
            row: dict[str, Any] = {
                "segment": k, "mode": mode, "on_clone": on_clone, "seconds": len(logs),
                "batches": cut, "log_ratio": statistics.fmean(logs) if logs else None,
                "counts": [statistics.fmean(c) if c else None for c in paired.counts]}
            data["segments"].append(row)
            logger.info("segment %d (%s, candidate on the %s): %d s, log-ratio %.3f, batches %s",
                        k, mode, "clone" if on_clone else "server", len(logs),
                        row["log_ratio"] or math.nan, [round(b, 3) for b in cut])
        workload.stop()
    finally:
        if clone is not None:
            clone.remove()
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    data["wall_s"] = round(time.monotonic() - started, 1)
    data["uptime_end"] = uptime()
    data["summary"] = summary(data["segments"])
    cmdline = "python -m benchmarks.duet_seeds " + " ".join(
        argv if argv is not None else sys.argv[1:])
    jpath, mpath = write_results(f"duet_seeds.{args.tag}", data, markdown(data, cmdline))
    print(f"wrote {jpath} and {mpath}")
    return 0


def summary(segments: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode: the within-orientation sd of the batch log-ratios (each orientation's mean
    removed: the clone's asymmetry), their count, and the ratio (the orientations' mean)."""
    out: dict[str, dict[str, Any]] = {}
    for mode, _, _ in MODES:
        sides: dict[bool, list[float]] = {True: [], False: []}
        for s in segments:
            if s["mode"] == mode:
                sides[s["on_clone"]] += s["batches"]
        resid = [b - statistics.fmean(v) for v in sides.values() if v for b in v]
        n = len(resid)
        sd = math.sqrt(sum(r * r for r in resid) / (n - 2)) if n > 2 else None
        ratio = (math.exp(0.5 * (statistics.fmean(sides[True]) + statistics.fmean(sides[False])))
                 if sides[True] and sides[False] else None)
        out[mode] = {"batches": n, "batch_sd": sd, "ratio": ratio}
    return out


def markdown(data: dict[str, Any], command: str) -> str:
    a = data["args"]
    lines = ["# Common random numbers in a duet (issue 51)", "", f"Command: `{command}`  ",
             f"Machine: {data['machine']}  ",
             f"Uptime: {data['uptime_start']} / {data['uptime_end']}  ",
             f"Wall-clock: {data['wall_s']} s", "",
             f"The A/A's `.sql` range mix, {CLIENTS} clients, on a server and its clone; "
             f"{a['segments']} segments of {a['segment_s']} s per mode, the modes interleaved, "
             f"roles swapped every other round; batches of {BATCH_S} s.", "",
             "| mode | batches | batch sd of the log-ratio | ratio |", "|---|---:|---:|---:|"]
    for mode, row in data["summary"].items():
        sd = f"{row['batch_sd']:.3f}" if row["batch_sd"] is not None else "–"
        ratio = f"{row['ratio']:.3f}×" if row["ratio"] is not None else "–"
        lines.append(f"| {mode} | {row['batches']} | {sd} | {ratio} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
