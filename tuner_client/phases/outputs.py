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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harmony_base.errors import HarmonyError
from harmony_base.jsontypes import JSONObject
from harmony_core.priordata import dump
from tuner_client.api.client import Session
from tuner_client.api.prior_export import session_prior
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import PointRecord
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
from tuner_client.plan.managed import ManagedRun, operator_values

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutputInputs:
    """What the outputs read of the run (:meth:`of`): its records and sessions, the BME
    fit and probe decisions the offline sessions' exports carry, the objective's unit, the
    restart-time knobs, the server's catalog and a managed run's facts."""

    records: Sequence[PointRecord]
    #: (session, kind) of every session the run opened
    sessions: Sequence[tuple[Session, str]]
    #: :meth:`RunState.bme_metadata`
    bme: JSONObject | None
    unit: str
    restart_knobs: frozenset[str]
    catalog: KnobCatalog
    managed: ManagedRun | None

    @classmethod
    def of(cls, ctx: RunContext, state: RunState) -> OutputInputs:
        """The run's, once its final rounds are decided."""
        return cls(tuple(state.records), tuple(state.sessions), state.bme_metadata(),
                   ctx.unit, frozenset(ctx.offline_space.names),
                   ctx.target.catalog, ctx.managed)


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


def recommendation(run: OutputInputs, result: TuneResult) -> Recommendation:
    """The run's recommendation (the knobs that changed, or all when none did), read against
    the server's catalog, with the database and role of a managed run."""
    settings = result.best.changed or result.best.settings
    ci = result.intervals.improvement_ci
    evidence = (f"measured: {1 + result.improvement:.3f}x the original"
                + (f" (95 % interval {1 + ci[0]:.3f}-{1 + ci[1]:.3f})" if ci else "")
                if result.improvement is not None else "")
    if run.managed is None:
        return replace(_plain(settings, set(run.restart_knobs)), evidence=evidence)
    rights = run.managed.server.rights
    return Recommendation.of(settings, run.catalog, database=rights.database,
                             role=rights.role, evidence=evidence,
                             operator=operator_values(run.managed))


def write_outputs(run: OutputInputs, result: TuneResult, out: Path) -> None:
    """Write the run's files into ``out``: the recommendation in every format of the mode
    (:func:`~tuner_client.phases.writers.writers_for`), the records, the summary."""
    out.mkdir(parents=True, exist_ok=True)
    rec = recommendation(run, result)
    written = []
    for writer in writers_for(MANAGED if run.managed is not None else SERVER):
        (out / writer.file_name).write_text(writer.render(rec))
        written.append(writer.file_name)
    with (out / "trials.jsonl").open("w") as fh:
        for record in run.records:
            fh.write(json.dumps(record.to_dict(), default=str) + "\n")
    # the report's inputs (the race round by round, every paired ratio) beside the result
    decision, trace = result.intervals.decision, result.intervals.trace
    summary = {**result.to_dict(), **report_inputs(
        run.records, result.intervals.rounds,
        decision.to_dict() if decision is not None else None, result.work.decisions, run.unit,
        trace=trace.to_dict(winner=decision.winner, decision_level=decision.decision_level,
                            unstable=decision.unstable)
        if trace is not None and decision is not None else None)}
    if run.managed is not None:
        summary["managed"] = run.managed.to_dict([k.name for k in rec.knobs])
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    exported = export_sessions(run, out / "sessions", result)
    logger.info("wrote %s", ", ".join(str(out / f) for f in (
        *written, "trials.jsonl", "summary.json")))
    if exported:
        logger.info("exported %d session(s) to %s; e.g. harmony report %s --from-xml %s",
                    len(exported), out / "sessions", exported[0].stem, exported[0])


def export_sessions(run: OutputInputs, directory: Path, result: TuneResult) -> list[Path]:
    """Each session of the run as prior data (XML), its metadata completed with the
    comparison and (offline sessions) the BME fit, for reports and later warm starts."""
    written = []
    for session, kind in run.sessions:
        try:
            prior = session_prior(session, finished=True)
        except HarmonyError as exc:
            logger.warning("session %s not exported: %s", session.name, exc)
            continue
        metadata = dict(prior.definition.get("metadata") or {})
        comparison = result.best.throughput.comparison()
        if comparison is not None:
            metadata["comparison"] = comparison
        if kind == "offline" and run.bme is not None:
            metadata.update(run.bme)
        prior.definition = {**prior.definition, "metadata": metadata}
        written.append(dump(prior, directory / f"{_file_name(prior.name)}.xml"))
    return written


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
