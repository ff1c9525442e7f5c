"""A comparison's facts (:class:`tuner_client.engine.designs.Comparison`) from the config and
the knob catalog: one reading for the run (:mod:`tuner_client.phases.design_choice`, which
adds the memory budget of the actual candidates) and the plan (:mod:`tuner_client.plan.designs`,
before any candidate exists), so that ``--plan`` and the run choose by the same rules."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.conninfo import conninfo_to_dict

from tuner_client.config import TunerConfig
from tuner_client.engine.designs import (
    AUTO,
    DUET,
    PER_TRANSACTION,
    SWITCHBACK,
    SYSTEM_WIDE_KNOBS,
    WINDOWS,
    Comparison,
)
from tuner_client.knobs.catalog import KnobCatalog
from workloads.per_transaction.from_config import unsupported_reason

#: the designs a search session can run: per transaction, by switchback (reload-time knobs
#: without memory, live traffic: :mod:`tuner_client.phases.search_switchback`), by duet
#: (knobs with memory and restart-time knobs where a clone of the server can run beside it,
#: one clone for the session: :mod:`tuner_client.phases.search_duet`), in windows (where
#: none of them can)
SEARCH_DESIGNS = (PER_TRANSACTION, SWITCHBACK, DUET, WINDOWS)
#: the offline search's (restart-time knobs, after the buffer miss probes): its few
#: evaluations restart the server in windows with warm restarts (:mod:`tuner_client.phases.
#: offline`); its best meets the clone in the final race
OFFLINE_SEARCH_DESIGNS = (PER_TRANSACTION, SWITCHBACK, WINDOWS)


#: why a live search stays in windows unless ``measure.design: switchback`` asks for it
LIVE_SEARCH = ("on live counters a switchback search is valid but not more precise than "
               "windows (shop traffic: ±41 % against ±35 %, benchmarks/results/"
               "switchback_search.default.md): set measure.design: switchback to search by "
               "switchback")


def live_traffic(config: TunerConfig) -> bool:
    """Whether the traffic is the application's (``workload.observe``)."""
    wl = config.workload
    return wl.observe is not None or wl.kind == "observe"


#: hosts of a DSN that name this machine
LOCAL_HOSTS = ("", "localhost", "127.0.0.1", "::1")


def clone_reason(config: TunerConfig, replicated: bool) -> str | None:
    """Why no clone of the server can run a duet beside it (None: one can, or the user named
    a twin, ``database.twin``, which runs wherever it is)."""
    if live_traffic(config):
        return ("the traffic is live: the application talks to one server, and a clone would "
                "see none of it")
    if replicated:
        return "the race runs over several replicas"
    if config.database.twin is not None:
        return None  # the user's twin holds the same data: no copy is made
    if not config.measure.clone:
        return "measure.clone is off (no scratch copy of the server beside it)"
    if not config.database.embedded:
        host = str(conninfo_to_dict(config.database.dsn or "").get("host") or "")
        if host not in LOCAL_HOSTS and not host.startswith("/"):
            return (f"the server is on {host}: a clone on this host would run on other "
                    f"hardware")
    return None


def comparison(config: TunerConfig, catalog: KnobCatalog, differing: Sequence[str], *,
               replicated: bool, search: bool, memory_pressure: str | None = None
               ) -> Comparison:
    """The :class:`Comparison` in which the knobs ``differing`` differ.

    ``replicated``: the comparison spans several databases. ``search``: a search session's
    comparison, whose knobs with a system-wide side are measured by switchback beside the
    per-transaction runs (:mod:`tuner_client.phases.search_per_transaction`), so they do not
    count against it (a switchback search switches them with the rest); an unpaired session
    or replicas on other hosts keep it in windows."""
    contexts = {n: catalog[n].context if n in catalog else "unknown" for n in differing
                if not (search and n in SYSTEM_WIDE_KNOBS)}
    driver = unsupported_reason(config.workload)
    replicas = "the race runs over several replicas" if replicated else None
    if search:
        if not config.measure.paired:
            driver = driver or ("measure.paired is off (the session aggregates single window "
                                "samples)")
        if config.replicas.remote:
            replicas = "replicas on other hosts measure the same session in windows"
    switch_driver = None if live_traffic(config) else driver
    if search and live_traffic(config) and config.measure.design == AUTO:
        switch_driver = LIVE_SEARCH
    return Comparison(contexts=contexts, memory_pressure=memory_pressure, driver=driver,
                      switch_driver=switch_driver,
                      replicas=replicas, clone=clone_reason(config, replicated))
