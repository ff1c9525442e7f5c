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

from tuner_client.config import KnobSpace, TunerConfig
from tuner_client.engine.comparison import SEARCH_DESIGNS, comparison
from tuner_client.engine.designs import (
    PRECISION,
    SYSTEM_WIDE_KNOBS,
    choose,
)
from tuner_client.knobs.catalog import KnobCatalog


def search_design(config: TunerConfig, catalog: KnobCatalog, space: KnobSpace) -> str:
    """The design of a search session over ``space``, in one line."""
    choice = choose(comparison(config, catalog, space.names,
                               replicated=config.replicas.enabled, search=True),
                    config.measure.design, SEARCH_DESIGNS)
    wide = [n for n in space.names if n in SYSTEM_WIDE_KNOBS]
    if not choice.per_transaction or not wide:
        return choice.text()
    return (f"{choice.text()}; {', '.join(wide)} (a system-wide side) in a paired "
            f"whole-server window block per value beside the runs")


def final_design(config: TunerConfig, catalog: KnobCatalog, offline: KnobSpace,
                 online: KnobSpace) -> str:
    """The final race's design, in one line: for the candidates differing in every online
    knob, and what a difference in a restart-time (offline) knob changes."""
    choice = choose(comparison(config, catalog, online.names, replicated=config.replicas.enabled,
                               search=False),
                    config.measure.design, PRECISION)
    text = f"when the candidates differ in the online knobs: {choice.text()}"
    if not offline.names:
        return text
    if config.final.restart_part == "apart" and not choice.universal:
        return (f"{text}; when {', '.join(offline.names)} differs too (a restart): split, the "
                f"session part as above and the restart part in whole-server windows "
                f"(final.restart_part: apart)")
    return f"{text}; when {', '.join(offline.names)} differs too (a restart): whole-server windows"
