"""The tuning run: one-pass (offline then online) and multi-pass (repeated, detector-driven).

The run is a pipeline of phases (:mod:`tuner_client.phases`): **prepare** (target, spaces,
budget, measurer) → **passes** (the offline session on the restart-only knobs, then the online
session under the budget those leave; the multi-pass flow repeats while the local-minimum or
workload-shift detector asks for it) → **final** rounds (default vs the search's best
candidates, interleaved: the decision) → **outputs** (SQL, conf fragment, trials, exports).
Whatever happens (an error, Ctrl-C, SIGTERM), the server is left running with its original
configuration (or the best one with ``final.apply_best``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harmony_base.errors import ConfigError
from tuner_client.api.client import HarmonyClient, connect
from tuner_client.budget import BudgetView
from tuner_client.config import TunerConfig
from tuner_client.crashsafe.run import RunSafety, config_keys
from tuner_client.duet.twin import check_twin
from tuner_client.measurer import PointRecord, Workload
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.final import final_rounds
from tuner_client.phases.offline import offline_pass
from tuner_client.phases.online import online_pass
from tuner_client.phases.outputs import OutputInputs, write_outputs
from tuner_client.phases.prepare import leave_server, prepare
from tuner_client.phases.result import TuneResult
from tuner_client.phases.screening import screening_phase
from tuner_client.phases.state import RunContext, RunState
from tuner_client.phases.warm import load_priors
from tuner_client.replicas import Replica, ReplicaPool, close_replicas, open_replicas
from tuner_client.servers.target import Target, default_state_dir, open_target

__all__ = ["TuneResult", "Tuner"]

logger = logging.getLogger(__name__)


class Tuner:
    """One tuning run of a :class:`TunerConfig` (see the module docstring).

    ``client``, ``target`` and ``workload`` default to the configured ones; ``on_record``
    is called with each search evaluation, ``on_measured`` with every measured record (the
    final rounds too), ``on_decision`` with each decision's text. ``replicas`` are more
    targets to tune on at once (default: the configured ``replicas``; see
    :mod:`tuner_client.replicas`): with them or without, the run measures on a pool.
    """

    def __init__(self, config: TunerConfig, *, server: str | None = None,
                 state_dir: Path | None = None, output_dir: Path | None = None,
                 client: HarmonyClient | None = None, target: Target | None = None,
                 workload: Workload | None = None, run_id: str | None = None,
                 metrics: TunerMetrics | None = None,
                 on_record: Callable[[PointRecord], None] | None = None,
                 on_measured: Callable[[PointRecord], None] | None = None,
                 on_decision: Callable[[str], None] | None = None,
                 replicas: list[Replica] | None = None) -> None:
        self.config = config
        self.server = server if server is not None else config.server
        self.state_dir = state_dir
        self.output_dir = output_dir
        self.run_id = run_id or time.strftime("%Y%m%d-%H%M%S")
        self._client, self._target, self._workload = client, target, workload
        self._replicas = replicas
        # never None: without a metrics port the updates go to a registry nobody serves
        self.metrics = metrics if metrics is not None else TunerMetrics(
            [k.name for k in config.knob_specs()], tuner=config.name)
        self.state = RunState(on_record=on_record, on_measured=on_measured,
                              on_decision=on_decision)
        self.context: RunContext | None = None

    @property
    def records(self) -> list[PointRecord]:
        """Every measured record of the run, in order."""
        return self.state.records

    @property
    def pool(self) -> ReplicaPool | None:
        """The databases the run measures on (this target first), once prepared."""
        return self.context.pool if self.context is not None else None

    @property
    def budget(self) -> BudgetView | None:
        """The memory budget, once prepared."""
        return self.context.budget if self.context is not None else None

    def run(self) -> TuneResult:
        """prepare → passes (offline, [screening], online) → final rounds → outputs; the
        server is always left running with the original (or, with ``final.apply_best``, the
        best) configuration."""
        cfg, state = self.config, self.state
        # read before anything starts: a missing file is a config error
        priors = load_priors(cfg.warm_start, source=cfg.source) if cfg.warm_start.enabled \
            else []
        safety = RunSafety(cfg, self.run_id)
        # a server (or the duet's twin) an earlier run died on is put back before anything
        # else touches it
        for key in config_keys(cfg, self.state_dir):
            safety.recover_leftovers(key)
        target = self._target or open_target(cfg, self.state_dir)
        if cfg.database.twin is not None:
            check_twin(target.dsn, cfg.database.twin)  # the duet's twin: the same data
        client = self._client or connect(self.server)
        result: TuneResult | None = None
        others: list[Replica] = []
        restored = True
        try:
            # the restore journal and its guard, before the first change to the server
            safety.protect(target)
            with target.controller.safe_restart_guard(cfg.database.restart_timeout_s):
                # the guard turns SIGTERM into SystemExit and, on the way out, makes sure the
                # server is up (restoring the last good configuration if a restart was cut
                # short); the finally below then restores the original configuration
                others = self._other_replicas(target)
                for replica in others:
                    safety.protect(replica.target)
                ctx = self.context = prepare(cfg, run_id=self.run_id, client=client,
                                             target=target, metrics=self.metrics,
                                             priors=priors, workload=self._workload,
                                             replicas=others, lease_s=cfg.replicas.lease_s,
                                             remote=cfg.replicas.remote)
                for line in ctx.managed.lines() if ctx.managed is not None else []:
                    state.decide(Decision.line("managed", line, design=None))
                for proposal in ctx.knob_proposals:
                    state.decide(Decision.of("online.knobs", Kind.KNOBS, step="auto",
                                             labels=proposal.knobs, why=proposal.symptom,
                                             reason=proposal.evidence))
                self._passes(ctx)
                result = final_rounds(ctx, state)
                if ctx.measurer.guard is not None:
                    result.evidence = replace(result.evidence,
                                              guardrails=ctx.measurer.guard.summary())
                result.output_dir = self.output_dir
                if self.output_dir is not None:
                    write_outputs(OutputInputs.of(ctx, state), result, self.output_dir)
            return result
        except (KeyboardInterrupt, SystemExit):
            logger.warning("interrupted: restoring the original configuration")
            raise
        finally:
            keep = bool(result is not None and cfg.final.apply_best)
            if self.context is not None:
                restored = leave_server(self.context, state.best, keep_best=keep)
            # the completion mark, once every server is as the run means to leave it
            safety.finish(restored)
            close_replicas(others)
            self.metrics.set_phase("idle")
            if self._client is None:
                client.close()
            if self._target is None:
                target.close()

    def _other_replicas(self, target: Target) -> list[Replica]:
        """The databases the run measures on besides ``target`` (none: a pool of one)."""
        cfg = self.config
        others = self._replicas
        if others is None:
            others = open_replicas(cfg, target, self.state_dir or default_state_dir(cfg.name)) \
                if cfg.replicas.enabled else []
        if (others or cfg.replicas.remote) and not cfg.measure.paired:
            close_replicas(others)
            raise ConfigError(f"{cfg.source}: tuning on several replicas compares each "
                              f"candidate with its own replica's reference, so it needs "
                              f"measure.paired: true (got false)")
        return others

    def _passes(self, ctx: RunContext) -> None:
        """Offline then online, repeated in a multi-pass flow while a detector asks."""
        flow, state = self.config.flow, self.state
        for n in range(1, flow.max_passes + 1):
            state.start_pass(n)
            self.metrics.start_pass(n)
            logger.info("=== pass %d of at most %d (%s) ===", n, flow.max_passes, flow.kind)
            offline_best = offline_pass(ctx, state, n)
            if n == 1:
                screening_phase(ctx, state)
            again = online_pass(ctx, state, n, offline_best)
            if flow.kind == "one-pass" or not again:
                return
            if n == flow.max_passes:
                state.decide(Decision.of(
                    f"pass {n}", Kind.SKIPPED, step="pass", count=flow.max_passes,
                    reason=f"a restart was asked for, but max_passes {flow.max_passes} is "
                           f"reached"))

