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

from psycopg.conninfo import conninfo_to_dict

from tuner_client.config import KnobSpace, TunerConfig
from tuner_client.engine.comparison import SEARCH_DESIGNS, comparison
from tuner_client.engine.designs import (
    PRECISION,
    SYSTEM_WIDE_KNOBS,
    Choice,
    choose,
)
from tuner_client.knobs.catalog import KnobCatalog


def search_design(config: TunerConfig, catalog: KnobCatalog, space: KnobSpace, *,
                  designs: tuple[str, ...] = SEARCH_DESIGNS, data_bytes: int | None = None,
                  shared_buffers: str | None = None) -> str:
    """The design of a search session over ``space`` among ``designs``, in one line (a
    duet's clone with its disk, memory and set-up time)."""
    choice = choose(comparison(config, catalog, space.names,
                               replicated=config.replicas.enabled, search=True),
                    config.measure.design, designs)
    if choice.clones:
        return (f"{choice.text()} "
                f"({second_text(config, data_bytes, shared_buffers, after='the session')})")
    wide = [n for n in space.names if n in SYSTEM_WIDE_KNOBS]
    if not choice.per_transaction or not wide:
        return choice.text()
    return (f"{choice.text()}; {', '.join(wide)} (a system-wide side) measured by "
            f"switchback beside the runs (the values a batch needs in one run)")


#: a base backup's speed assumed by the plan (bytes/s), and a clone's start (s)
CLONE_COPY_BPS = 100 * 2 ** 20
CLONE_START_S = 5.0


def clone_text(data_bytes: int | None, shared_buffers: str | None, *,
               after: str = "the race") -> str:
    """What a duet's clone costs: disk, memory and set-up time (estimates before the run)."""
    if data_bytes is None:
        disk, setup = "the server's data × 1.2 of disk", "its copy at ~100 MB/s plus a start"
    else:
        disk = f"{1.2 * data_bytes / 2 ** 20:,.0f} MiB of disk (the data × 1.2)"
        setup = f"about {CLONE_START_S + data_bytes / CLONE_COPY_BPS:.0f} s"
    memory = (f"about {shared_buffers} more memory (its shared_buffers)" if shared_buffers
              else "its shared_buffers more memory")
    return (f"a clone of the server beside it (pg_basebackup into HARMONY_CLONE_DIR, default "
            f"/var/tmp): {disk}, {memory} plus its clients' work memory, set-up {setup}; "
            f"removed after {after}")


def second_text(config: TunerConfig, data_bytes: int | None, shared_buffers: str | None, *,
                after: str = "the race") -> str:
    """The duet's second cluster for the plan: the user's twin where ``database.twin`` names
    one, else the clone the tuner would make (:func:`clone_text`)."""
    if config.database.twin is not None:
        return twin_text(config, after=after)
    return clone_text(data_bytes, shared_buffers, after=after)


def twin_text(config: TunerConfig, *, after: str = "the race") -> str:
    """The user's twin a duet runs on (``database.twin``), in words."""
    twin = config.database.twin
    assert twin is not None
    params = conninfo_to_dict(twin.dsn)
    where = (f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}/"
             f"{params.get('dbname') or ''}")
    restarts = (f"restarted by its {twin.controller.kind} controller for a restart-time knob"
                if twin.controller is not None
                else "no controller: reload-time knobs only")
    return (f"the twin {where} named in database.twin beside it (no copy made; checked to hold "
            f"the same data first; {restarts}; its configuration restored after {after})")


def final_design(config: TunerConfig, catalog: KnobCatalog, offline: KnobSpace,
                 online: KnobSpace, *, data_bytes: int | None = None,
                 shared_buffers: str | None = None) -> str:
    """The final race's design, in one line: for the candidates differing in every online
    knob, and what a difference in a restart-time (offline) knob changes; a duet's clone with
    its disk (``data_bytes`` of data), memory and set-up time."""
    def chosen(names: list[str]) -> Choice:
        return choose(comparison(config, catalog, names, replicated=config.replicas.enabled,
                                 search=False), config.measure.design, PRECISION)

    choice = chosen(online.names)
    text = f"when the candidates differ in the online knobs: {choice.text()}"
    clone = second_text(config, data_bytes, shared_buffers)
    if choice.clones:
        text += f" ({clone})"
    if not offline.names:
        return text
    both = chosen(online.names + offline.names)
    no_duet = both.why_no_clone()
    restart = (f"by duet ({clone})" if both.clones else
               f"in whole-server windows{f' (no duet: {no_duet})' if no_duet else ''}")
    if config.final.restart_part == "apart" and not choice.carries_restart:
        budget = (f", in {config.final.restart_seconds:g} s (final.restart_seconds)"
                  if config.final.restart_seconds is not None else "")
        return (f"{text}; when {', '.join(offline.names)} differs too (a restart): split, the "
                f"session part as above and the restart part {restart}{budget} "
                f"(final.restart_part: apart)")
    if both.clones:
        return (f"{text}; when {', '.join(offline.names)} differs too (a restart): the whole "
                f"race by duet ({clone})")
    return f"{text}; when {', '.join(offline.names)} differs too (a restart): {restart}"
