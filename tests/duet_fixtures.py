"""Where the duet tests put their clones, and their kill tests' owner process: started, waited
for, killed with SIGKILL, and what is looked for afterwards."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def clone_parent() -> Iterator[Path]:
    """A directory for clones, not under pytest's ``tmp_path``: another pytest process may
    make that root private (0700) at any moment, and the server's OS user then loses its way
    to the clone's files (seen: "could not open file .../global/pg_control: Permission
    denied" while other sessions ran their tests)."""
    path = Path(tempfile.mkdtemp(prefix="harmony-test-clones-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def gone(pid: int) -> bool:
    """The process has ended (gone, or a zombie its parent, here maybe a container's init that
    reaps nothing, has not collected)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:].startswith("Z")


def pgbench_pids() -> list[str]:
    """The pids of the duet's pgbench clients (their per-second reports) still running."""
    found = subprocess.run(["pgrep", "-f", "pgbench .*--progress-timestamp"],
                           capture_output=True, text=True)
    return found.stdout.split()


def start_owner(script: Path, text: str, args: list[str], journals: Path
                ) -> tuple[subprocess.Popen[str], list[str]]:
    """Run ``text`` (a tuner stand-in) as a process of its own, its journals in ``journals``;
    it prints one line (paths, pids) once it is ready: returned split."""
    script.write_text(text)
    env = {**os.environ, "HARMONY_JOURNAL_DIR": str(journals),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), *args], env=env,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()


def wait_for_segment() -> None:
    """Until both clients of a duet segment run (at most 30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(pgbench_pids()) < 2:
        time.sleep(0.1)
    assert len(pgbench_pids()) >= 2, "the duet segment did not start"


def kill_owner(proc: subprocess.Popen[str]) -> None:
    """SIGKILL, as the OOM killer or ``kill -9`` end a tuner."""
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
