"""Phase 4, the outputs: the result as ``ALTER SYSTEM`` statements and a ``postgresql.conf``
fragment, every record (``trials.jsonl``), the summary, and the run's sessions as prior data.

Each session is exported (``sessions/NAME.xml``) with ``metadata["comparison"]`` (default vs
tuned, and recommended when measured) and, for the offline sessions, ``metadata["bme"]`` (the
fit and its points), which ``harmony report NAME --from-xml FILE`` shows without flags.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from harmony_base.errors import HarmonyError
from harmony_core.priordata import dump
from tuner_client.api.prior_export import session_prior
from tuner_client.measurer import objective_unit
from tuner_client.phases.report_inputs import report_inputs
from tuner_client.phases.result import TuneResult
from tuner_client.phases.state import RunContext, RunState

logger = logging.getLogger(__name__)


def alter_system_sql(settings: Mapping[str, str], offline: set[str]) -> str:
    """``ALTER SYSTEM`` statements for ``settings`` (values quoted as SQL literals)."""
    lines = ["-- written by harmony tune: apply with psql as a superuser"]
    for name, value in settings.items():
        quoted = value.replace("'", "''")
        note = "  -- needs a restart" if name in offline else ""
        lines.append(f"ALTER SYSTEM SET {name} = '{quoted}';{note}")
    lines.append("SELECT pg_reload_conf();")
    if offline & set(settings):
        lines.append(f"-- then restart PostgreSQL for {', '.join(sorted(offline & set(settings)))}")
    return "\n".join(lines) + "\n"


def conf_fragment(settings: Mapping[str, str]) -> str:
    """The same settings as ``postgresql.conf`` lines."""
    body = "".join(f"{name} = '{value.replace(chr(39), chr(39) * 2)}'\n"
                   for name, value in settings.items())
    return "# written by harmony tune\n" + body


def write_outputs(ctx: RunContext, state: RunState, result: TuneResult, out: Path) -> None:
    """Write the run's files into ``out`` (the knobs that changed, or all when none did)."""
    out.mkdir(parents=True, exist_ok=True)
    settings = result.best.changed or result.best.settings
    offline = set(ctx.offline_space.names)
    (out / "alter_system.sql").write_text(alter_system_sql(settings, offline))
    (out / "postgresql.conf.fragment").write_text(conf_fragment(settings))
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
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    exported = export_sessions(state, out / "sessions", result)
    logger.info("wrote %s", ", ".join(str(out / f) for f in (
        "alter_system.sql", "postgresql.conf.fragment", "trials.jsonl", "summary.json")))
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
