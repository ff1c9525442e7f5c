"""The measurement engine's chooser (issue 45): the most precise design valid for the knobs
that differ, ``measure.design`` as an override, the validity table as data."""

from __future__ import annotations

import pytest

from harmony_base.errors import ConfigError
from tuner_client.engine.comparison import SEARCH_DESIGNS
from tuner_client.engine.designs import (
    AUTO,
    DUET,
    MEMORY,
    PER_TRANSACTION,
    PRECISION,
    SWITCHBACK,
    VALIDITY,
    WINDOWS,
    Comparison,
    choose,
    knob_class,
    reason_against,
)

SESSION_ONLY = Comparison(contexts={"work_mem": "user", "random_page_cost": "user"})
PARALLEL = Comparison(contexts={"work_mem": "user", "max_parallel_workers_per_gather": "user"})
RELOAD = Comparison(contexts={"wal_writer_delay": "sighup"})
WITH_MEMORY = Comparison(contexts={"checkpoint_completion_target": "sighup",
                                   "max_wal_size": "sighup"})
RESTART = Comparison(contexts={"shared_buffers": "postmaster", "work_mem": "user"})
NO_CLONE = "the traffic is live: the application talks to one server"


@pytest.mark.parametrize(("comparison", "design"), [
    (SESSION_ONLY, PER_TRANSACTION), (PARALLEL, SWITCHBACK), (RELOAD, SWITCHBACK),
    (RESTART, DUET), (WITH_MEMORY, DUET), (Comparison(), PER_TRANSACTION)])
def test_auto_takes_the_most_precise_valid_design(comparison: Comparison, design: str) -> None:
    choice = choose(comparison)
    assert choice.design == design
    # every design passed over is more precise than the one chosen, and says why
    assert [d for d, _ in choice.passed_over] == list(PRECISION[:PRECISION.index(design)])
    assert all(why for _, why in choice.passed_over)


def test_the_reasons_name_the_knob_its_context_and_the_measurement() -> None:
    text = choose(PARALLEL).text()
    assert text.startswith("switchback, the most precise design valid here; not per-transaction:")
    assert "max_parallel_workers_per_gather ('user') differs" in text
    assert "0.77× per transaction and 1.22×" in text
    text = choose(RESTART).text()
    assert "shared_buffers ('postmaster') differs" in text and "not switchback" in text
    assert "work_mem" not in text  # a session knob is no reason against either


def test_restart_time_knobs_and_knobs_with_memory_go_to_duet_windows_only_without_a_clone(
        ) -> None:
    for comparison in (RESTART, WITH_MEMORY):
        no_clone = Comparison(contexts=comparison.contexts, clone=NO_CLONE)
        choice = choose(no_clone)
        assert choice.design == WINDOWS
        assert dict(choice.passed_over)[DUET] == NO_CLONE  # said why
    text = choose(WITH_MEMORY).text()
    assert "checkpoint_completion_target ('sighup'), max_wal_size ('sighup') differ" in text
    assert "not switchback: " in text and "cycle longer than a slice" in text
    # a restart-time knob with memory stays a restart-time knob
    assert knob_class("autovacuum_max_workers", "postmaster") == "restart"
    assert knob_class("bgwriter_delay", "sighup") == MEMORY
    assert knob_class("autovacuum_naptime", "sighup") == MEMORY

def test_conditions_on_the_workload_and_servers_pass_designs_over() -> None:
    no_driver = Comparison(contexts={"work_mem": "user"},
                           driver="workload kind 'synthetic' has no per-transaction driver",
                           switch_driver="workload kind 'synthetic' has no driver",
                           clone="the synthetic workload has no client that counts per second")
    assert choose(no_driver).design == WINDOWS
    live = Comparison(contexts={"work_mem": "user"}, driver="live traffic is the application's")
    assert choose(live).design == SWITCHBACK  # counters read at the slices' edges
    replicated = Comparison(contexts={"work_mem": "user"}, replicas="several replicas")
    choice = choose(replicated)
    assert choice.design == WINDOWS and len(choice.passed_over) == 3
    pressure = Comparison(contexts={"work_mem": "user"}, memory_pressure="work_mem takes 70 %")
    assert choose(pressure).design == SWITCHBACK
    assert reason_against(PER_TRANSACTION, pressure) == "work_mem takes 70 %"


def test_a_request_is_where_the_choice_starts_never_an_invalid_design() -> None:
    assert choose(SESSION_ONLY, WINDOWS).design == WINDOWS
    assert choose(SESSION_ONLY, SWITCHBACK).design == SWITCHBACK
    assert choose(SESSION_ONLY, PER_TRANSACTION).text() == \
        "per-transaction (measure.design: per-transaction)"
    # per-transaction asked for, a restart-time knob differs: windows, said why
    choice = choose(RESTART, PER_TRANSACTION)
    assert choice.design == DUET and choice.requested == PER_TRANSACTION
    choice = choose(Comparison(contexts=RESTART.contexts, clone=NO_CLONE), PER_TRANSACTION)
    assert choice.design == WINDOWS
    # the designs given bound the choice: without switchback among them, windows
    assert choose(PARALLEL, AUTO, (PER_TRANSACTION, WINDOWS)).design == WINDOWS
    # a search's designs hold switchback (issue 51, item 3) and duet (item 1): a restart-time
    # knob is searched on a clone where one can run, in windows where none can
    assert choose(PARALLEL, AUTO, SEARCH_DESIGNS).design == SWITCHBACK
    assert choose(RESTART, AUTO, SEARCH_DESIGNS).design == DUET
    assert choose(Comparison(contexts=RESTART.contexts, clone=NO_CLONE), AUTO,
                  SEARCH_DESIGNS).design == WINDOWS
    with pytest.raises(ConfigError, match="measure.design must be one of auto, "
                                          "per-transaction, switchback, duet, windows.*'fast'"):
        choose(SESSION_ONLY, "fast")


def test_the_table_covers_every_class_and_design_and_windows_carries_everything() -> None:
    for klass, row in VALIDITY.items():
        assert set(row) == set(PRECISION), klass
        assert row[WINDOWS] is None, klass
    assert knob_class("work_mem", "user") == "session"
    assert knob_class("max_parallel_workers_per_gather", "user") == "system-wide"
    assert knob_class("checkpoint_timeout", "sighup") == "memory"
    assert knob_class("wal_writer_delay", "sighup") == "reload"
    assert knob_class("shared_buffers", "postmaster") == "restart"
    assert knob_class("unknown_knob", "unknown") == "restart"
