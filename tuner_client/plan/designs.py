"""Which design each phase of a planned run measures in, and why (``harmony tune --plan``):
the measurement engine's choice (:func:`tuner_client.engine.designs.choose`) made before the
run, from the config and the catalog.

The search sessions' comparisons are known in advance (every searched knob may differ from
the reference); the final race's are not (which knobs differ depends on what the search
finds), so its line gives the design for the widest case, every online knob differing, and
says what a restart-time difference does. The run's decisions repeat each choice with the
comparison actually measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner_client.config import KnobSpace, TunerConfig
from tuner_client.engine.designs import (
    PER_TRANSACTION,
    PRECISION,
    SYSTEM_WIDE_KNOBS,
    WINDOWS,
    Comparison,
    choose,
)
from tuner_client.knobs.catalog import KnobCatalog
from workloads.per_transaction.from_config import unsupported_reason


def _comparison(config: TunerConfig, catalog: KnobCatalog, names: Sequence[str], *,
                search: bool) -> Comparison:
    """The comparison in which every one of ``names`` differs (see
    :func:`tuner_client.phases.design_choice.comparison_of`, the run's twin, which also
    sees the memory budget of the actual candidates)."""
    live = config.workload.observe is not None or config.workload.kind == "observe"
    driver = unsupported_reason(config.workload)
    r = config.replicas
    replicas = "the race runs over several replicas" if (
        r.count > 1 or r.targets or r.remote) else None
    if search and not config.measure.paired:
        driver = driver or "measure.paired is off (the session aggregates single window samples)"
    contexts = {n: catalog[n].context if n in catalog else "unknown" for n in names
                if not (search and n in SYSTEM_WIDE_KNOBS)}
    return Comparison(contexts=contexts, driver=driver,
                      switch_driver=None if live else driver, replicas=replicas)


def search_design(config: TunerConfig, catalog: KnobCatalog, space: KnobSpace) -> str:
    """The design of a search session over ``space``, in one line."""
    choice = choose(_comparison(config, catalog, space.names, search=True),
                    config.measure.design, (PER_TRANSACTION, WINDOWS))
    wide = [n for n in space.names if n in SYSTEM_WIDE_KNOBS]
    if choice.design != PER_TRANSACTION or not wide:
        return choice.text()
    return (f"{choice.text()}; {', '.join(wide)} (a system-wide side) in a paired "
            f"whole-server window block per value beside the runs")


def final_design(config: TunerConfig, catalog: KnobCatalog, offline: KnobSpace,
                 online: KnobSpace) -> str:
    """The final race's design, in one line: for the candidates differing in every online
    knob, and what a difference in a restart-time (offline) knob changes."""
    choice = choose(_comparison(config, catalog, online.names, search=False),
                    config.measure.design, PRECISION)
    text = f"when the candidates differ in the online knobs: {choice.text()}"
    if not offline.names:
        return text
    if config.final.restart_part == "apart" and choice.design != WINDOWS:
        return (f"{text}; when {', '.join(offline.names)} differs too (a restart): split, the "
                f"session part as above and the restart part in whole-server windows "
                f"(final.restart_part: apart)")
    return f"{text}; when {', '.join(offline.names)} differs too (a restart): whole-server windows"
