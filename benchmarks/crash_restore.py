"""Evidence for issue 47: ``kill -9`` of the tuner at random instants; is the server put back?

    python -m benchmarks.crash_restore [--kills 30] [--mode tuner|group|reboot] [--live]
        [--trigger REGEX [--trigger-spread S]] [--tag T]

A PostgreSQL cluster the tuner did not create (made here, reached by DSN and a ``pg_ctl``
controller, pgbench tables at scale 2) is tuned by ``harmony tune`` as a child process: a
restart-time knob (shared_buffers, so restarts and warm restarts happen) and four reload-time
ones, pgbench as the workload, short budgets so that one run passes through every phase
(prepare, restart, BME probes, search, final race, restore) in about a minute. Each case
starts a run and kills it at an instant drawn uniformly over the run's length (a little past
it, so the restore itself is hit too):

- ``tuner``: SIGKILL to the tuner's process only;
- ``group``: SIGKILL to its whole process group (the tuner and every child it started);
- ``reboot``: SIGKILL to the tuner, its guard and its children, an immediate stop of the
  server and a start (the host's reboot: the journal on disk, no process of the tuner left,
  the server started by the init system with whatever its files say), then ``harmony
  restore CONFIG`` by hand.

``--live`` tunes in live mode instead (pg_stat_statements preloaded, the bench's own pgbench
traffic at a fixed rate, the tuner observing it and changing reload-time knobs). ``--trigger``
kills once a line of the tuner's log matches, after a random delay (e.g. the final decision,
to kill during the restore itself).

After each kill, without anyone acting (apart from ``harmony restore`` in ``reboot``), the
server must come back to the original within ``--deadline`` s: up, ``postgresql.auto.conf``
byte-equal to the original, every setting in force equal to the original; and no pgbench or
connection of the run may survive. The phase a case hit is the module of the tuner's last log
line before the kill. Writes ``benchmarks/results/crash_restore[.T].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.server_proc import machine
from tuner_client.servers.local_cluster import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results"
HARMONY = [sys.executable, "-m", "harmony.cli"]
#: the settings whose value in force is compared with the original (besides the file)
WATCHED = ("shared_buffers", "work_mem", "random_page_cost", "effective_cache_size",
           "max_parallel_workers_per_gather")


def _database(cluster: LocalCluster, dsn: str) -> str:
    """The config's database section: the bench's cluster by DSN, restarted with pg_ctl."""
    return f"""database:
  dsn: "{dsn}"
  controller:
    kind: pg_ctl
    options: {{data_dir: {cluster.data_dir}, bin_dir: {cluster.bin_dir}}}
  restart_timeout_s: 60
"""


def _live_config(cluster: LocalCluster, dsn: str) -> str:
    """Live mode: the tuner observes the bench's own pgbench traffic and drives none."""
    return f"""name: crash-restore-live
{_database(cluster, dsn)}workload:
  observe: {{min_calls: 10, poll_s: 0.25}}
measure: {{warmup_s: 0.5, samples: 2, seconds: 2}}
online:
  knobs:
    work_mem: {{min: 1MB, max: 64MB, step: 1MB}}
    random_page_cost: {{min: 1, max: 8, step: 0.5}}
    effective_cache_size: {{min: 128MB, max: 2GB, step: 64MB}}
  evaluations: 6
final: {{rounds: 2, max_rounds: 2}}
"""


def _config(cluster: LocalCluster, dsn: str) -> str:
    return f"""name: crash-restore
{_database(cluster, dsn)}workload:
  pgbench: {{scale: 2, clients: 2}}
measure: {{warmup_s: 0.5, samples: 2, seconds: 1}}
offline:
  knobs:
    shared_buffers: {{min: 32MB, max: 256MB, step: 16MB}}
  evaluations: 2
online:
  knobs:
    work_mem: {{min: 1MB, max: 64MB, step: 1MB}}
    random_page_cost: {{min: 1, max: 8, step: 0.5}}
    effective_cache_size: {{min: 128MB, max: 2GB, step: 64MB}}
    max_parallel_workers_per_gather: {{min: 0, max: 2}}
  evaluations: 4
final: {{rounds: 2, max_rounds: 2}}
"""


class Bench:
    """The user's server and what 'original' means for it."""

    def __init__(self, workdir: Path, *, live: bool = False) -> None:
        self.workdir = workdir
        self.cluster = LocalCluster(workdir / "server")
        self.cluster.init()
        if live:  # live mode reads pg_stat_statements, which must be preloaded
            conf = self.cluster.data_dir / "postgresql.conf"
            conf.write_text(conf.read_text()
                            + "\nshared_preload_libraries = 'pg_stat_statements'\n")
        self.cluster.start()
        with psycopg.connect(self.cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
            # the user's own setting, which a restore must keep
            conn.execute("ALTER SYSTEM SET log_min_duration_statement = '5s'")
            conn.execute("SELECT pg_reload_conf()")
        self.dsn = self.cluster.dsn_for("bench")
        subprocess.run([str(self.cluster.bin_dir / "pgbench"), "-i", "-q", "-s", "2", self.dsn],
                       check=True, capture_output=True)
        if live:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pg_stat_statements")
        self.config = workdir / "crash-restore.yaml"
        self.config.write_text((_live_config if live else _config)(self.cluster, self.dsn))
        self.load: subprocess.Popen[bytes] | None = None
        self.journals = workdir / "journals"
        self.original_file = self.auto_conf()
        self.original = self.settings()

    def auto_conf(self) -> str:
        return (self.cluster.data_dir / "postgresql.auto.conf").read_text()

    def settings(self) -> dict[str, str] | None:
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                                    [list(WATCHED)]).fetchall()
        except psycopg.Error:
            return None
        return {r[0]: r[1] for r in rows}

    def start_load(self) -> None:
        """The application's own traffic for live mode: pgbench at a fixed rate, named
        ``bench-load`` so that it is told apart from anything the tuner starts."""
        self.load = subprocess.Popen(
            [str(self.cluster.bin_dir / "pgbench"), "-n", "-S", "-c", "2", "-j", "1",
             "-R", "400", "-T", "3600", self.dsn],
            env={**os.environ, "PGAPPNAME": "bench-load"}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    def leftovers(self) -> dict[str, int]:
        """pgbench processes and the run's connections still there (the live load aside)."""
        pgbench = subprocess.run(["pgrep", "-f", f"pgbench .*port={self.cluster.port} "],
                                 capture_output=True, text=True)
        runs = [p for p in pgbench.stdout.split()
                if self.load is None or int(p) != self.load.pid]
        connections = 0
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2,
                                 application_name="bench-check") as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                   "application_name LIKE 'harmony-%%' OR application_name = "
                                   "'pgbench'").fetchone()
                connections = int(row[0]) if row else 0
        except psycopg.Error:
            connections = -1
        return {"pgbench": len(runs), "connections": connections}

    def is_original(self) -> bool:
        return self.auto_conf() == self.original_file and self.settings() == self.original

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"HARMONY_JOURNAL_DIR": str(self.journals), "HARMONY_LOG_LEVEL": "INFO",
                    "PYTHONUNBUFFERED": "1"})
        return env


def _guard_pids(owner: int) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"crashsafe.guard .*--owner {owner}( |$)"],
                           capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _phase(log: Path) -> str:
    """The module of the tuner's last log line (``HH:MM:SS LEVEL module: text``)."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ": " in ln]
    for line in reversed(lines):
        parts = line.split()
        if len(parts) > 2 and parts[2].endswith(":") and "." in parts[2]:
            return parts[2].rstrip(":").replace("tuner_client.", "")
    return "start"


def _wait_for(proc: subprocess.Popen[bytes], log: Path, at_s: float,
              trigger: re.Pattern[str] | None, after_s: float) -> bool:
    """Wait ``at_s`` (or until a log line matches ``trigger``, then ``after_s`` more); False
    when the run ended first."""
    if trigger is None:
        try:
            proc.wait(timeout=at_s)
            return False
        except subprocess.TimeoutExpired:
            return True
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if trigger.search(log.read_text(errors="replace")):
            try:
                proc.wait(timeout=after_s)
                return False
            except subprocess.TimeoutExpired:
                return True
        time.sleep(0.02)
    return proc.poll() is None


def one_case(bench: Bench, at_s: float, mode: str, deadline_s: float, n: int,
             trigger: re.Pattern[str] | None = None) -> dict[str, Any]:
    log = bench.workdir / f"tune-{n}.log"
    out = bench.workdir / f"out-{n}"
    with log.open("w") as fh:
        proc = subprocess.Popen([*HARMONY, "tune", str(bench.config), "--output", str(out)],
                                stdout=fh, stderr=subprocess.STDOUT, env=bench.env(),
                                start_new_session=True)
    if not _wait_for(proc, log, at_s, trigger, at_s if trigger else 0.0):
        proc.wait()
        return {"n": n, "at_s": at_s, "mode": mode, "finished_first": True,
                "exit": proc.returncode, "original": bench.is_original(), "phase": "finished",
                "journals_left": sorted(p.name for p in bench.journals.glob("*.journal.json"))}
    phase = _phase(log)
    guards = _guard_pids(proc.pid)
    killed_at = time.monotonic()
    if mode == "group":
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    proc.wait()
    restore_cmd_s = None
    if mode == "reboot":
        for pid in guards:
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-f", f"pgbench .*port={bench.cluster.port} "],
                       check=False)
        bench.cluster.stop(mode="immediate")
        bench.cluster.start()
        started = time.monotonic()
        done = subprocess.run([*HARMONY, "restore", str(bench.config)], capture_output=True,
                              text=True, env=bench.env())
        restore_cmd_s = time.monotonic() - started
        (bench.workdir / f"restore-{n}.log").write_text(done.stdout + done.stderr)
    restored_s = None
    while time.monotonic() - killed_at < deadline_s:
        if bench.is_original():
            restored_s = time.monotonic() - killed_at
            break
        time.sleep(0.1)
    time.sleep(0.5)  # a leftover still running would show by now
    left = bench.leftovers()
    journals = sorted(p.name for p in bench.journals.glob("*.journal.json"))
    case = {"n": n, "at_s": round(at_s, 2), "mode": mode, "phase": phase,
            "guard_found": bool(guards), "restored_s": restored_s,
            "restore_command_s": restore_cmd_s, "leftovers": left,
            "journals_left": journals, "finished_first": False}
    if restored_s is None:
        case["auto_conf"] = bench.auto_conf()
        case["settings"] = bench.settings()
        subprocess.run([*HARMONY, "restore", str(bench.config), "--force"], env=bench.env(),
                       capture_output=True, check=False)
    return case


def summarize(cases: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    killed = [c for c in cases if not c["finished_first"]]
    times = [c["restored_s"] for c in killed if c["restored_s"] is not None]
    orphans = [c for c in killed if c["leftovers"]["pgbench"] or c["leftovers"]["connections"]]
    phases: dict[str, int] = {}
    for c in killed:
        phases[c["phase"]] = phases.get(c["phase"], 0) + 1
    return {"mode": mode, "cases": len(cases), "killed": len(killed),
            "restored": len(times), "not_restored": len(killed) - len(times),
            "finished_before_the_kill": len(cases) - len(killed),
            "restore_s_median": round(statistics.median(times), 2) if times else None,
            "restore_s_max": round(max(times), 2) if times else None,
            "with_leftovers": len(orphans), "phases": dict(sorted(phases.items()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--mode", choices=("tuner", "group", "reboot"), default="tuner")
    parser.add_argument("--deadline", type=float, default=90.0)
    parser.add_argument("--seed", type=int, default=47)
    parser.add_argument("--tag", default="")
    parser.add_argument("--live", action="store_true",
                        help="live mode: the tuner observes the bench's own pgbench traffic")
    parser.add_argument("--trigger", default=None, metavar="REGEX",
                        help="kill once a line of the tuner's log matches REGEX, after a delay "
                             "drawn uniformly in 0..--trigger-spread s (instead of at a "
                             "random instant), e.g. the final decision: the restore itself")
    parser.add_argument("--trigger-spread", type=float, default=1.5)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="harmony-crash-", dir="/tmp"))
    os.chmod(workdir, 0o755)
    bench = Bench(workdir, live=args.live)
    if args.live:
        bench.start_load()
    trigger = re.compile(args.trigger, re.MULTILINE) if args.trigger else None
    try:
        started = time.monotonic()
        # one whole run first: how long the phases take, and that a finished run restores
        full = one_case(bench, 600.0, args.mode, args.deadline, 0)
        length = time.monotonic() - started
        cases = []
        for n in range(1, args.kills + 1):
            at = rng.uniform(0.0, args.trigger_spread) if trigger else \
                rng.uniform(1.0, 1.05 * length)
            cases.append(one_case(bench, at, args.mode, args.deadline, n, trigger))
            print(json.dumps(cases[-1]), flush=True)
    finally:
        if bench.load is not None:
            bench.load.kill()
            bench.load.wait()
        bench.cluster.stop()
    command = " ".join(["python -m benchmarks.crash_restore", *(argv or sys.argv[1:])])
    result: dict[str, Any] = {"benchmark": "crash_restore", "command": command,
              "machine": machine(), "date": time.strftime("%Y-%m-%d"),
              "full_run_s": round(length, 1), "full_run": full,
              "summary": summarize(cases, args.mode), "cases": cases}
    suffix = f".{args.tag}" if args.tag else f".{args.mode}" + (".live" if args.live else "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"crash_restore{suffix}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0 if result["summary"]["not_restored"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
