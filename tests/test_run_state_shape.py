"""The run's state as a ledger and a trial's path (issue 53, item 4), pinned from the code and
from a real run.

- No module but ``tuner_client/phases/state.py`` assigns a :class:`RunState` field or changes
  one in place: the phases append through its methods (counted by
  :func:`benchmarks.design_metrics.measure_state`, which the test checks finds what it must).
- The functions that take the whole :class:`RunContext` or :class:`RunState` stay at most
  as many as after the narrowing (59; 67 at b783da1).
- A search trial's path: the project files on the stack when its workload measurement starts
  (:mod:`benchmarks.trial_path`), in a real run on a private cluster, from the :class:`Tuner`
  down: at most 8 files (9 at b783da1, 10 with ``harmony tune``'s two CLI files before them,
  12 at b783da1 with three).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from tune_fixtures import TpchCluster, tpch_cluster, tune, tune_yaml

import tuner_client.cli.tune
from benchmarks.design_metrics import measure_state, state_takers, state_writes
from benchmarks.trial_path import Probe
from harmony.cli import build_parser
from harmony_base.lazy import LazyFunction
from tuner_client.cli.tune_run import run_tune
from tuner_client.measurer import PointRecord

__all__ = ["tpch_cluster"]

ROOT = Path(__file__).resolve().parent.parent
#: functions taking a RunContext or a RunState after the narrowing (67 at b783da1, 59 after
#: it; the switchback search then added its session's entry point, its run and the two
#: evaluations' constructors, its helpers taking only what they read; the duet search its
#: session's entry point, and the final race its range rule for rules of thumb, in_range)
MOST_TAKERS = 66


def test_no_module_but_state_py_writes_a_run_state_field() -> None:
    """0 writes (9 at b783da1: flows' passes, offline's and the probes' bme and recommended,
    the probes' decisions, screening's ranking and prediction, the sessions)."""
    assert measure_state(ROOT)["writes to RunState fields outside state.py"] == []


def test_the_write_counter_finds_every_kind_of_write() -> None:
    """Assignments (plain, augmented, annotated, in a tuple, to an item) and in-place
    changes, through ``state``, ``self.state`` or ``run_state``; not other names' fields
    nor a RunState's read or method call."""
    code = ("state.best = r\nself.state.passes += 1\nstate.records.append(r)\n"
            "state.best_against, x = a, b\nstate.sessions[0] = s\nrun_state.bme: dict = {}\n"
            "tuner.state.probe_decisions.extend(p)\n"
            "state.other = 1\nctx.best = 1\nx = state.best\nstate.decide(d)\n")
    fields = {"best", "best_against", "passes", "records", "sessions", "bme",
              "probe_decisions"}
    assert sorted(state_writes(ast.parse(code), fields)) == [
        "best", "best_against", "bme", "passes", "probe_decisions", "records", "sessions"]


def test_few_functions_take_the_whole_run_state() -> None:
    takers = state_takers(ROOT)
    assert 0 < len(takers) <= MOST_TAKERS, sorted(set(takers))
    # the narrow inputs: the outputs read an OutputInputs, the session loop's helpers what
    # they use; only the session's entry point keeps the dispatcher's signature
    assert takers.count("tuner_client.phases.outputs") == 1  # OutputInputs.of
    assert takers.count("tuner_client.phases.session_loop") == 1


def test_harmony_tune_calls_the_run_itself() -> None:
    """``harmony tune``'s handler is ``run_tune``, looked up when the command runs: the CLI
    adds two files to a trial's path (``harmony/cli/__init__.py``, ``cli/tune_run.py``), not
    a forwarding function in the parser's module too."""
    args = build_parser().parse_args(["tune", "x.yaml"])
    assert isinstance(args.func, LazyFunction)
    assert args.func.resolve() is run_tune
    assert args.func.module is tuner_client.cli.tune.tune_run


class Enough(Exception):
    """Ends the run once a trial was measured (the Tuner restores the server on the way)."""


def test_a_search_trial_crosses_at_most_eight_files_below_the_tuner(
        tpch_cluster: TpchCluster, tmp_path: Path) -> None:
    yaml_text = tune_yaml(
        "trial-path", 1, mix="2Q6", measure="paired: true",
        offline="{knobs: {shared_buffers: {min: 16MB, max: 64MB, step: 8MB}}, evaluations: 2}",
        online="{knobs: {work_mem: {min: 1MB, max: 64MB, step: 1MB}}, evaluations: 2}",
        final="{rounds: 1, max_rounds: 2, max_seconds: 10}", extra="bme: {probes: 0}\n")

    def stop(record: PointRecord) -> None:
        raise Enough(record.session)

    tuner = tune(tpch_cluster, yaml_text, source="trial-path", run_id="trial-path",
                 output_dir=tmp_path, on_measured=stop)
    probe = Probe()
    sys.setprofile(probe)
    try:
        with pytest.raises(Enough):
            tuner.run()
    finally:
        sys.setprofile(None)
    stack = probe.stacks["windows"]
    assert stack[0] == "tuner_client/flows.py" and stack[-1].startswith("workloads/"), stack
    assert "tuner_client/phases/blocks.py" in stack, stack  # the paired trial, one block
    assert "tuner_client/phases/trials.py" not in stack, stack
    assert len(stack) <= 8, stack
