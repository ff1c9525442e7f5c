"""Where the duet tests put their clones, and what their kill tests look for afterwards."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
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
