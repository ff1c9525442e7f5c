"""PGTune's rules recomputed for a few machines, against numbers PGTune itself prints."""

from __future__ import annotations

import pytest

from harmony_base.errors import ConfigError
from tuner_client.knobs.pgtune import Machine, format_kb, pgtune_kb, pgtune_settings

GB = 1024**3
MB = 1024**2


def test_web_16gb_4cpu_100_connections_matches_pgtune_output() -> None:
    # PGTune (PostgreSQL 16, linux, web, 16 GB, 4 CPUs, 100 connections, ssd) prints these
    got = pgtune_settings(Machine(ram_bytes=16 * GB, cpus=4, connections=100, storage="ssd",
                                  db_type="web"))
    assert got == {
        "shared_buffers": "4GB", "effective_cache_size": "12GB", "maintenance_work_mem": "1GB",
        "checkpoint_completion_target": "0.9", "wal_buffers": "16MB",
        "default_statistics_target": "100", "random_page_cost": "1.1",
        "effective_io_concurrency": "200", "work_mem": "20971kB", "huge_pages": "off",
        "min_wal_size": "1GB", "max_wal_size": "4GB", "max_worker_processes": "4",
        "max_parallel_workers_per_gather": "2", "max_parallel_workers": "4",
        "max_parallel_maintenance_workers": "2"}


def test_web_2gb_8cpu_default_connections() -> None:
    kb = pgtune_kb(Machine(ram_bytes=2 * GB, cpus=8, db_type="web"))
    assert kb["max_connections"] == 200
    assert kb["shared_buffers"] == 512 * 1024
    assert kb["effective_cache_size"] == 1536 * 1024
    assert kb["maintenance_work_mem"] == 128 * 1024
    # 3 % of 512MB is 15.4MB: between 14MB and 16MB, so PGTune rounds up to 16MB
    assert kb["wal_buffers"] == 16 * 1024
    # (2GB - 512MB) / (200 * 3) / 4 workers per gather
    assert kb["work_mem"] == 655
    assert kb["max_parallel_workers_per_gather"] == 4


def test_data_warehouse_on_this_benchmarks_cgroup() -> None:
    # the end-to-end benchmark's machine: 256MB cgroup, 2 CPUs, 12 streams, dw
    kb = pgtune_kb(Machine(ram_bytes=256 * MB, cpus=2, connections=12, db_type="dw"))
    assert kb["shared_buffers"] == 64 * 1024
    assert kb["effective_cache_size"] == 192 * 1024
    assert kb["maintenance_work_mem"] == 32 * 1024  # RAM / 8 for dw
    assert kb["work_mem"] == 2730  # (256MB - 64MB) / 36 / 1 / 2
    assert kb["wal_buffers"] == 1966
    assert kb["default_statistics_target"] == 500
    assert "max_parallel_workers_per_gather" not in kb  # fewer than 4 CPUs
    assert (kb["min_wal_size"], kb["max_wal_size"]) == (4 * GB // 1024, 16 * GB // 1024)


def test_caps_and_floors() -> None:
    big = pgtune_kb(Machine(ram_bytes=64 * GB, cpus=16, connections=10, db_type="dw"))
    assert big["maintenance_work_mem"] == 2 * 1024 * 1024  # capped at 2GB
    assert big["huge_pages"] == "try"
    assert big["max_parallel_workers_per_gather"] == 8  # dw is not capped at 4
    assert big["max_parallel_maintenance_workers"] == 4
    tiny = pgtune_kb(Machine(ram_bytes=64 * MB, cpus=1, connections=500, db_type="desktop"))
    assert tiny["work_mem"] == 64  # floor of 64kB
    assert tiny["shared_buffers"] == 4 * 1024  # desktop: RAM / 16
    assert tiny["wal_buffers"] == 122  # 3 % of 4MB


def test_hdd_storage_and_formatting() -> None:
    got = pgtune_settings(Machine(ram_bytes=4 * GB, cpus=2, connections=20, storage="hdd",
                                  db_type="oltp"), include_max_connections=True)
    assert got["random_page_cost"] == "4"
    assert got["effective_io_concurrency"] == "2"
    assert got["max_connections"] == "20"
    assert format_kb(1536 * 1024) == "1536MB" and format_kb(1966) == "1966kB"


@pytest.mark.parametrize("kwargs", [{"db_type": "olap"}, {"storage": "nvme"}, {"cpus": 0},
                                    {"connections": 0}, {"ram_bytes": 1024}])
def test_bad_inputs_are_config_errors(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {"ram_bytes": GB, "cpus": 2}
    with pytest.raises(ConfigError):
        Machine(**{**base, **kwargs})  # type: ignore[arg-type]
