"""Phase 4, the outputs: the recommendation in every format of the run's mode
(:mod:`tuner_client.phases.writers`: ``ALTER SYSTEM`` and a ``postgresql.conf`` fragment; in
managed mode ``ALTER DATABASE``/``ALTER ROLE`` and the providers' parameter files), every
record (``trials.jsonl``), the summary, and the run's sessions as prior data.

Each session is exported (``sessions/NAME.xml``) with ``metadata["comparison"]`` (default vs
tuned, and recommended when measured) and, for the offline sessions, ``metadata["bme"]`` (the
fit and its points), which ``harmony report NAME --from-xml FILE`` shows without flags.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from harmony_base.errors import HarmonyError
from harmony_core.priordata import dump
from tuner_client.api.prior_export import session_prior
from tuner_client.measurer import objective_unit
from tuner_client.phases.report_inputs import report_inputs
from tuner_client.phases.result import TuneResult
from tuner_client.phases.state import RunContext, RunState
from tuner_client.phases.writers import (
    MANAGED,
    SERVER,
    AlterSystemWriter,
    ConfFragmentWriter,
    Recommendation,
    RecommendedKnob,
    writers_for,
)
from tuner_client.plan.managed import operator_values

logger = logging.getLogger(__name__)


def alter_system_sql(settings: Mapping[str, str], offline: set[str]) -> str:
    """``ALTER SYSTEM`` statements for ``settings`` (values quoted as SQL literals; the knobs
    in ``offline`` need a restart)."""
    return AlterSystemWriter().render(_plain(settings, offline))


def conf_fragment(settings: Mapping[str, str]) -> str:
    """The same settings as ``postgresql.conf`` lines."""
    return ConfFragmentWriter().render(_plain(settings, set()))


def _plain(settings: Mapping[str, str], offline: set[str]) -> Recommendation:
    """A recommendation read without a catalog: the values as written, ``offline`` knobs as
    restart-time."""
    return Recommendation(tuple(RecommendedKnob(n, v, v, "postmaster" if n in offline
                                                else "user") for n, v in settings.items()))


def recommendation(ctx: RunContext, result: TuneResult) -> Recommendation:
    """The run's recommendation (the knobs that changed, or all when none did), read against
    the server's catalog, with the database and role of a managed run."""
    settings = result.best.changed or result.best.settings
    ci = result.intervals.improvement_ci
    evidence = (f"measured: {1 + result.improvement:.3f}x the original"
                + (f" (95 % interval {1 + ci[0]:.3f}-{1 + ci[1]:.3f})" if ci else "")
                if result.improvement is not None else "")
    if ctx.managed is None:
        offline = set(ctx.offline_space.names)
        return replace(_plain(settings, offline), evidence=evidence)
    rights = ctx.managed.server.rights
    return Recommendation.of(settings, ctx.target.catalog, database=rights.database,
                             role=rights.role, evidence=evidence,
                             operator=operator_values(ctx.managed))


def write_outputs(ctx: RunContext, state: RunState, result: TuneResult, out: Path) -> None:
    """Write the run's files into ``out``: the recommendation in every format of the mode
    (:func:`~tuner_client.phases.writers.writers_for`), the records, the summary."""
    out.mkdir(parents=True, exist_ok=True)
    rec = recommendation(ctx, result)
    written = []
    for writer in writers_for(MANAGED if ctx.managed is not None else SERVER):
        (out / writer.file_name).write_text(writer.render(rec))
        written.append(writer.file_name)
    with (out / "trials.jsonl").open("w") as fh:
        for record in state.records:
            fh.write(json.dumps(record.to_dict(), default=str) + "\n")
    # the report's inputs (the race round by round, every paired ratio) beside the result
    decision, trace = result.intervals.decision, result.intervals.trace
    summary = {**result.to_dict(), **report_inputs(
        state.records, result.intervals.rounds,
        decision.to_dict() if decision is not None else None, result.work.decisions,
        objective_unit(ctx.config.measure.estimator, ctx.config.workload.kind),
        trace=trace.to_dict(winner=decision.winner, decision_level=decision.decision_level,
                            unstable=decision.unstable)
        if trace is not None and decision is not None else None)}
    if ctx.managed is not None:
        summary["managed"] = ctx.managed.to_dict([k.name for k in rec.knobs])
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    exported = export_sessions(state, out / "sessions", result)
    logger.info("wrote %s", ", ".join(str(out / f) for f in (
        *written, "trials.jsonl", "summary.json")))
    if exported:
        logger.info("exported %d session(s) to %s; e.g. harmony report %s --from-xml %s",
                    len(exported), out / "sessions", exported[0].stem, exported[0])


def export_sessions(state: RunState, directory: Path, result: TuneResult) -> list[Path]:
    """Each session of the run as prior data (XML), its metadata completed with the
    comparison and (offline sessions) the BME fit, for reports and later warm starts."""
    written = []
    for session, kind in state.sessions:
        try:
            prior = session_prior(session, finished=True)
        except HarmonyError as exc:
            logger.warning("session %s not exported: %s", session.name, exc)
            continue
        metadata = dict(prior.definition.get("metadata") or {})
        comparison = result.best.throughput.comparison()
        if comparison is not None:
            metadata["comparison"] = comparison
        if kind == "offline" and state.bme is not None:
            metadata["bme"] = state.bme
        if kind == "offline" and state.probe_decisions:
            metadata["bme_probes"] = state.probe_decisions
        prior.definition = {**prior.definition, "metadata": metadata}
        written.append(dump(prior, directory / f"{_file_name(prior.name)}.xml"))
    return written


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
