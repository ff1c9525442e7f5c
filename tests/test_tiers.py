"""The test tiers: cluster tests are marked ``postgres`` by their fixtures, slow files ``slow``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_unit_tier_starts_no_cluster() -> None:
    # neither file marks anything in its source: only the fixtures they use (pg_cluster,
    # fresh_dsn, own_cluster, cluster_factory, _pg_template) put them in the postgres tier
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-m", "not postgres and not slow",
                           "tests/test_local_cluster.py", "tests/test_knobs.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    unit = {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}
    assert unit == {"test_bad_bin_dir_is_a_clear_error", "test_state_dir_under_root_is_refused"}
    assert "deselected" in done.stdout  # the cluster tests were collected, then left out
