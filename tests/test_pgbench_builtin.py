"""``workload.pgbench.builtin``: pgbench's own select-only (or simple-update) script as the
workload, e.g. a read workload whose working set tests shared_buffers (issue 51)."""

from __future__ import annotations

import pytest

from harmony_base.errors import ConfigError
from tuner_client.config import tuner_config_from_dict
from workloads.factory import make_workload
from workloads.pgbench import PgbenchWorkload


def _config(pgbench: dict[str, object]) -> dict[str, object]:
    return {"name": "t", "database": {"memory_limit": "1GB"},
            "workload": {"pgbench": pgbench}}


def test_the_builtin_reaches_pgbench_and_defaults_to_tpcb() -> None:
    cfg = tuner_config_from_dict(_config({"scale": 40, "clients": 4,
                                          "builtin": "select-only"}))
    workload = make_workload(cfg.workload, "host=127.0.0.1 port=1 dbname=x")
    assert isinstance(workload, PgbenchWorkload)
    argv, _ = workload.progress_command("host=127.0.0.1 port=1 dbname=x", 10)
    assert argv[argv.index("-b") + 1] == "select-only"
    assert (workload.scale, workload.clients) == (40, 4)
    default = tuner_config_from_dict(_config({"scale": 1}))
    assert default.workload.builtin == "tpcb-like"


def test_an_unknown_builtin_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"builtin") as caught:
        tuner_config_from_dict(_config({"scale": 1, "builtin": "select"}))
    assert "select" in str(caught.value)
