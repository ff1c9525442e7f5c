"""Does the duet's restart race narrow when both clusters restart alike? An A/A of
shared_buffers (256MB against 320MB on pgbench -S at scale 10, ~150 MB: both hold it) raced by
:func:`tuner_client.duet.race.run_duet` with the tuner's segments for a restart race
(:func:`tuner_client.phases.final_duet.segment_seconds` with ``restart=True``), in three
modes, interleaved so that the machine's drift falls on each alike:

- ``asymmetric``: the server's restarts warm (its buffer recorded before, loaded back after,
  as the run's applier does with ``measure.prewarm``), the clone's cold: what the tuner does;
- ``warm``: both warm (:class:`WarmRestarts` on each: the buffer recorded before a restart
  and loaded back after it, by the run's own :class:`~tuner_client.measurer.prewarm.Prewarmer`);
- ``cold``: both cold.

Every candidate is the reference's twin: the half-width at the end is the race's precision,
and any claim is false.

    flock /tmp/harmony-bench.lock python -m benchmarks.restart_warmth [--repeats N] \
        [--seconds S] [--tag T]

Writes ``benchmarks/results/restart_warmth[.T].{json,md}``.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.duet_race import pgbench_select_only
from benchmarks.evidence.common import header, load_average, machine, write_results
from tuner_client.duet.clone import make_clone
from tuner_client.duet.driver import client_runner
from tuner_client.duet.race import Arm, run_duet
from tuner_client.measurer.prewarm import BufferRecord, Prewarmer, PrewarmResult
from tuner_client.phases.final_duet import segment_seconds
from tuner_client.servers.local_cluster import LocalCluster
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)

SCALE, CLIENTS = 10, 2
REFERENCE, CANDIDATE = {"shared_buffers": "256MB"}, {"shared_buffers": "320MB"}
MODES = ("asymmetric", "warm", "cold")


@dataclass
class WarmRestarts:
    """Records a cluster's buffer (through ``dsn``, the workload's database) before each
    restart and loads it back after, as the run's applier does for the server."""

    dsn: str
    prewarmer: Prewarmer = field(default_factory=Prewarmer)
    #: what each restart loaded back, in order
    results: list[PrewarmResult] = field(default_factory=list)

    def wrap(self, put: Callable[[Mapping[str, str]], bool]
             ) -> Callable[[Mapping[str, str]], bool]:
        """``put`` (which restarts) with the buffer recorded before and loaded after."""
        def warm_put(settings: Mapping[str, str]) -> bool:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                record: BufferRecord | str = self.prewarmer.record(conn)
            restarted = put(settings)
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.results.append(self.prewarmer.load(conn, record))
            return restarted
        return warm_put


def _restarter(cluster: LocalCluster) -> Callable[[Mapping[str, str]], bool]:
    """ALTER SYSTEM and a restart of ``cluster``; True (it restarted)."""
    def put(settings: Mapping[str, str]) -> bool:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            for name, value in settings.items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(name), sql.Literal(value)))
        cluster.restart()
        return True
    return put


def _arm(name: str, dsn: str, cluster: LocalCluster, warm: bool) -> tuple[Arm, WarmRestarts]:
    restarts = WarmRestarts(dsn)
    put = _restarter(cluster)
    return Arm(name, dsn, restarts.wrap(put) if warm else put,
               data_dir=cluster.data_dir), restarts


def _race(mode: str, cluster: LocalCluster, dsn: str, state: Path, seconds: float,
          workload: PgbenchWorkload) -> dict[str, Any]:
    clone = make_clone(dsn, journals=state / "journals", mark="bench-restart-warmth",
                       parent=state)
    started, load = time.monotonic(), load_average()
    segment = segment_seconds(seconds, 1, restart=True)
    try:
        server, server_warm = _arm("server", dsn, cluster, mode in ("asymmetric", "warm"))
        other, clone_warm = _arm("clone", clone.dsn_like(dsn), clone.cluster, mode == "warm")
        # both start on the reference's value
        for arm in (server, other):
            arm.put(REFERENCE)
        outcome = run_duet(server, other, [REFERENCE, CANDIDATE], ["reference", "candidate"],
                           client_runner(workload.progress_command), max_seconds=seconds,
                           segment_s=segment)
    finally:
        clone.remove()
    row: dict[str, Any] = {"mode": mode, "seconds": round(time.monotonic() - started, 1),
                           "segment_s": segment, "load_at_start": load,
                           "prewarmed_blocks": {"server": [r.blocks for r in server_warm.results],
                                                "clone": [r.blocks for r in clone_warm.results]}}
    if outcome is not None:
        c = outcome.plain["candidate"]
        row.update(ratio=c.interval.ratio, low=c.interval.low, high=c.interval.high,
                   half_width=0.5 * math.log(c.interval.high / c.interval.low)
                   if c.interval.low > 0 and math.isfinite(c.interval.high) else None,
                   batches=c.batches, segments=c.segments, asymmetry=c.asymmetry,
                   segment_half_width=c.segment_half_width,
                   claim=outcome.winner is not None or c.interval.below_one)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.restart_warmth")
    parser.add_argument("--repeats", type=int, default=2, help="races per mode")
    parser.add_argument("--seconds", type=float, default=240.0,
                        help="each race's budget (s); the tuner's duet default is 240")
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    command = "flock /tmp/harmony-bench.lock python -m benchmarks.restart_warmth " + \
        " ".join(argv if argv is not None else sys.argv[1:])
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-warmth-", dir="/var/tmp"))
    data: dict[str, Any] = {"machine": machine(), "command": command, "scale": SCALE,
                            "clients": CLIENTS, "races": []}
    cluster = LocalCluster(state / "c1", sync_initdb=False)
    name = "restart_warmth" + f".{args.tag}" * bool(args.tag)
    try:
        dsn, workload = pgbench_select_only(cluster, SCALE, CLIENTS)
        for repeat in range(args.repeats):
            for mode in MODES:
                row = _race(mode, cluster, dsn, state, args.seconds, workload)
                row["repeat"] = repeat
                logger.info("%s", row)
                data["races"].append(row)
                write_results(name, data, markdown(data, command))
    finally:
        cluster.destroy()
        shutil.rmtree(state, ignore_errors=True)
    data["load_after"] = load_average()
    write_results(name, data, markdown(data, command))
    return 0


def markdown(data: dict[str, Any], command: str) -> str:
    md = [header("The restart race's precision by how the clusters restart", command,
                 data["machine"],
                 f"\nA/A: shared_buffers {REFERENCE['shared_buffers']} against "
                 f"{CANDIDATE['shared_buffers']} on pgbench -S, scale {data['scale']}, "
                 f"{data['clients']} clients per cluster; the server and a pg_basebackup "
                 f"clone, both restarted at every swap (ABBA), the tuner's restart-race "
                 f"segments; the modes interleaved. Half-width: the race's 95 % interval at "
                 f"its end.\n"),
          "| repeat | mode | ratio | 95 % interval | half-width | batches (segments) | claim "
          "| clone/server | by segment | seconds | load at start |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["races"]:
        if r.get("ratio") is None:
            md.append(f"| {r['repeat']} | {r['mode']} | – | – | – | – | – | – | – | "
                      f"{r['seconds']:.0f} | – |")
            continue
        half, seg = r["half_width"], r["segment_half_width"]
        md.append(f"| {r['repeat']} | {r['mode']} | {r['ratio']:.3f} | "
                  f"{r['low']:.3f}–{r['high']:.3f} | "
                  f"{'∞' if half is None else f'±{100 * half:.1f} %'} | "
                  f"{r['batches']} ({r['segments']}) | {'yes' if r['claim'] else 'no'} | "
                  f"{r['asymmetry']:.3f} | {'–' if seg is None else f'±{100 * seg:.1f} %'} | "
                  f"{r['seconds']:.0f} | {', '.join(str(x) for x in r['load_at_start'])} |")
    md += ["", "| mode | races | half-width median | max | claims |", "|---|---|---|---|---|"]
    for mode in MODES:
        rows = [r for r in data["races"] if r["mode"] == mode and r.get("half_width")]
        if rows:
            widths = [r["half_width"] for r in rows]
            md.append(f"| {mode} | {len(rows)} | ±{100 * statistics.median(widths):.1f} % | "
                      f"±{100 * max(widths):.1f} % | {sum(bool(r['claim']) for r in rows)} |")
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
