"""Where the duet tests put their clones."""

from __future__ import annotations

import shutil
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
