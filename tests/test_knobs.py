"""The knob catalog read from a real server: kinds, exact unit conversion, range errors."""

from __future__ import annotations

import psycopg
import pytest

from harmony_base.errors import ConfigError
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster

MB = 1024 * 1024


@pytest.fixture(scope="module")
def catalog(pg_cluster: LocalCluster) -> KnobCatalog:
    with psycopg.connect(pg_cluster.dsn) as conn:
        return KnobCatalog.from_connection(conn)


def test_catalog_reads_pg_settings_and_block_size(catalog: KnobCatalog) -> None:
    assert len(catalog) > 300
    assert catalog.block_size == 8192
    assert catalog.server_version_num is not None and catalog.server_version_num >= 120000
    sb = catalog["shared_buffers"]
    assert (sb.vartype, sb.unit, sb.context, sb.kind) == ("integer", "8kB", "postmaster", "offline")
    assert sb.unit_size == 8192
    assert catalog["work_mem"].kind == "online"
    assert catalog["max_wal_size"].kind == "online"  # sighup
    assert catalog["commit_delay"].kind == "online"  # superuser
    assert catalog["TimeZone"].name == "TimeZone" and catalog["timezone"] is catalog["TimeZone"]


def test_non_tunable_and_unknown_knobs_are_clear_errors(catalog: KnobCatalog) -> None:
    with pytest.raises(ConfigError, match="block_size.*internal"):
        catalog.tunable("block_size")
    assert not catalog["block_size"].tunable
    with pytest.raises(ConfigError, match="'work_mem'"):
        catalog["work_mme"]
    with pytest.raises(ConfigError, match="shared_buffers"):
        catalog.tunable("shared_bufers")
    assert "work_mem" in catalog and "WORK_MEM" in catalog and "nope" not in catalog


def test_memory_units_convert_exactly(catalog: KnobCatalog) -> None:
    sb, wm = catalog["shared_buffers"], catalog["work_mem"]
    assert sb.parse("128MB") == 128 * MB
    assert sb.to_native(128 * MB) == 16384  # 8kB blocks
    assert sb.parse("128kB") == 131072 and sb.to_native(sb.parse("1GB")) == 131072
    assert sb.format(128 * MB) == "128MB" and sb.format(24 * 1024) == "24kB"
    assert sb.format(4 * 1024 * MB) == "4GB"
    assert wm.parse("64MB") == 64 * MB and wm.to_native(64 * MB) == 65536  # kB
    assert wm.parse("1.5MB") == 1536 * 1024 and wm.format(1536 * 1024) == "1536kB"
    assert wm.parse("65536kB") == wm.parse("64MB")
    assert wm.format(64 * MB) == "64MB"
    ecs, tb = catalog["effective_cache_size"], catalog["temp_buffers"]
    assert ecs.parse("8kB") == 8192 and ecs.unit_size == 8192
    assert ecs.bytes_to_native(2 * 1024 * MB) == 262144
    assert tb.native_to_bytes(1024) == 8 * MB and tb.current() == 8 * MB
    assert wm.to_unit(64 * MB, "MB") == 64 and wm.from_unit(64, "MB") == 64 * MB
    assert wm.to_unit(1536 * 1024, "MB") * 2 == 3  # exact 1.5
    # the current server value in canonical bytes: 4MB default work_mem
    assert wm.current() == 4 * MB and wm.default() == 4 * MB
    assert catalog["max_wal_size"].parse("2GB") == 2048 * MB  # MB-unit knob


def test_inexact_values_and_wrong_units_are_errors(catalog: KnobCatalog) -> None:
    sb, wm = catalog["shared_buffers"], catalog["work_mem"]
    with pytest.raises(ConfigError, match=r"shared_buffers .*8kB.*'100kB'"):
        sb.parse("100kB")  # 12.5 blocks
    with pytest.raises(ConfigError, match=r"work_mem .*whole.*'1500B'"):
        wm.parse("1500B")
    with pytest.raises(ConfigError, match=r"work_mem needs a unit"):
        wm.parse(65536)  # a bare number for a knob with a unit
    with pytest.raises(ConfigError, match=r"case-sensitive: did you mean 'MB'"):
        wm.parse("64mb")
    with pytest.raises(ConfigError, match=r"valid units are B, kB, MB, GB, TB.*'ms'"):
        wm.parse("64ms")
    with pytest.raises(ConfigError, match="random_page_cost has no unit"):
        catalog["random_page_cost"].parse("4MB")


def test_range_errors_name_knob_range_and_value(catalog: KnobCatalog) -> None:
    with pytest.raises(ConfigError) as err:
        catalog["work_mem"].parse("5TB")
    msg = str(err.value)
    assert "work_mem must be between 64kB and 2147483647kB" in msg and "'5TB'" in msg
    with pytest.raises(ConfigError, match=r"shared_buffers must be between 128kB"):
        catalog["shared_buffers"].parse("64kB")
    with pytest.raises(ConfigError, match="random_page_cost must be between 0 and "):
        catalog["random_page_cost"].parse(-1.0)
    with pytest.raises(ConfigError, match=r"between 1 and 1000.*0\.5"):
        catalog["hash_mem_multiplier"].parse(0.5)


def test_time_bool_enum_real_and_sentinels(catalog: KnobCatalog) -> None:
    st = catalog["statement_timeout"]  # ms, integer
    assert st.parse("1min") == 60_000 and st.format(60_000) == "1min"
    assert st.parse("1500ms") == 1500 and st.format(1500) == "1500ms"
    assert st.parse(0) == 0 and st.format(0) == "0ms"
    with pytest.raises(ConfigError, match="statement_timeout .*whole"):
        st.parse("500us")
    assert catalog["checkpoint_timeout"].parse("5min") == 300_000
    assert catalog["checkpoint_timeout"].to_native(300_000) == 300  # seconds
    assert catalog["checkpoint_timeout"].format(300_000) == "5min"
    vcd = catalog["vacuum_cost_delay"]  # real, ms
    assert vcd.parse("500us") == 0.5 and vcd.format(0.5) == "0.5ms"
    jit = catalog["jit"]
    assert jit.parse("off") is False and jit.parse(True) is True and jit.format(False) == "off"
    with pytest.raises(ConfigError, match="jit is a boolean"):
        jit.parse("maybe")
    hp = catalog["huge_pages"]
    assert hp.parse("TRY") == "try" and hp.parse(False) == "off"
    with pytest.raises(ConfigError, match="huge_pages must be one of"):
        hp.parse("sometimes")
    rpc = catalog["random_page_cost"]
    assert rpc.parse(1.1) == 1.1 and rpc.parse("30") == 30.0 and rpc.format(1.1) == "1.1"
    mpw = catalog["max_parallel_workers_per_gather"]
    assert mpw.parse(0) == 0 and mpw.format(4) == "4"
    with pytest.raises(ConfigError, match="max_parallel_workers_per_gather .*whole"):
        mpw.parse(2.5)
    awm = catalog["autovacuum_work_mem"]  # -1 = use maintenance_work_mem
    assert awm.parse(-1) == -1024 and awm.format(awm.parse(-1)) == "-1"
    assert catalog["application_name"].parse("x") == "x"


def test_canonical_values_are_checked(catalog: KnobCatalog) -> None:
    sb, wm = catalog["shared_buffers"], catalog["work_mem"]
    assert sb.check(256 * MB) == 256 * MB and sb.coerce("256MB") == sb.coerce(256 * MB)
    assert wm.check(64.0 * MB) == 64 * MB and isinstance(wm.check(64.0 * MB), int)
    with pytest.raises(ConfigError, match="shared_buffers is counted in whole units of 8kB"):
        sb.check(100 * 1024)
    with pytest.raises(ConfigError, match="work_mem must be between 64kB and 2147483647kB"):
        wm.check(32 * 1024)
    with pytest.raises(ConfigError, match="jit is a boolean"):
        catalog["jit"].check(1)


def test_round_down_puts_a_computed_size_on_the_knobs_units(catalog: KnobCatalog) -> None:
    """PGTune computes sizes in kB (RAM/4 of 23.5 GiB is 6171023kB): shared_buffers counts
    8kB pages, so the exact parse refuses it and round_down takes the page below."""
    sb = catalog["shared_buffers"]
    with pytest.raises(ConfigError, match="whole units of 8kB"):
        sb.parse("6171023kB")
    assert sb.parse("6171023kB", round_down=True) == 6171016 * 1024
    assert sb.parse(sb.format(sb.parse("6171023kB", round_down=True))) == 6171016 * 1024
    from tuner_client.knobs.pgtune import Machine, pgtune_on_grid
    got = pgtune_on_grid(Machine(ram_bytes=23 * 2**30 + 12345 * 1024, cpus=2, connections=20,
                                 db_type="dw"), catalog, ["shared_buffers", "work_mem", "jit"])
    assert set(got) == {"shared_buffers", "work_mem"}  # PGTune does not set jit
    for name, value in got.items():
        catalog[name].parse(value)  # exact now: on the knob's units
