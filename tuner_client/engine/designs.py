"""The measurement designs and which one a comparison uses: the validity table as data, one
chooser (issue 45).

A comparison is two or more configurations measured against each other: a search's batch
beside its reference, the final race of the candidates beside the original. Three designs
can measure one, from the most precise to the least (measured on this machine, 2 cores):

- ``per-transaction``: one run in which every transaction draws a configuration at random
  and runs under ``SET LOCAL``; every arm sees the same seconds of the machine, so the
  machine's drift over seconds cancels: ±1.5–3 % in minutes (``stats.per_transaction``).
- ``switchback``: the whole server alternates the configurations in short slices with
  ``ALTER SYSTEM`` + reload, a random order per block (``stats.switchback``).
- ``duet``: the server and a scratch clone of it (``tuner_client.duet``) run one configuration
  each at the same seconds, the roles swapped between segments (a reload or a restart), so
  the machine's drift cancels for restart-time knobs too: an A/A read ±9.7 % in 100 s where
  interleaved windows read ±48 % (``benchmarks/results/duet.full.md``). It needs a clone:
  a workload client that counts per second (pgbench, scripts), the server on this host, and
  never live traffic (the application talks to one server).
- ``windows``: each configuration measured on the whole server in turn, interleaved rounds:
  a window's level moves 2–2.5× more than its samples explain (per-window sd 7–15 %).

What a design can carry depends on the knobs that differ between the configurations, by
class (:func:`knob_class`), and on the workload and the servers (:data:`REQUIREMENTS`):
:data:`VALIDITY` holds both as data, with the measurement behind each "no". The chooser
(:func:`choose`) takes the most precise design valid for the comparison; ``measure.design``
may name a design to start from (``auto``: the most precise), never one that is not valid.
Pure: no server, no run context; :func:`tuner_client.phases.design_choice.comparison_of`
builds the :class:`Comparison` from a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harmony_base.errors import ConfigError
from tuner_client.knobs.sides import SYSTEM_WIDE_KNOBS
from workloads.per_transaction.settings import SESSION_CONTEXTS

PER_TRANSACTION = "per-transaction"
SWITCHBACK = "switchback"
DUET = "duet"
WINDOWS = "windows"
#: ``measure.design: auto``: the most precise valid design for each comparison
AUTO = "auto"
#: the designs, the most precise first (duet after switchback: as precise for what both carry,
#: but it copies the data; it is taken where switchback cannot measure)
PRECISION: tuple[str, ...] = (PER_TRANSACTION, SWITCHBACK, DUET, WINDOWS)
#: the design valid for every comparison (:data:`VALIDITY`'s column without a "no")
UNIVERSAL = WINDOWS
#: what ``measure.design`` accepts
REQUESTS: tuple[str, ...] = (AUTO, *PRECISION)

#: contexts a reload changes for every session (SET LOCAL: only ``SESSION_CONTEXTS``)
RELOAD_CONTEXTS = frozenset({"sighup", *SESSION_CONTEXTS})

#: knobs with memory: their effect plays out over a cycle longer than a slice (a checkpoint
#: started under one setting writes on under the next; the background writer and autovacuum
#: work off a backlog the previous setting left), so a switch does not end it
MEMORY_KNOBS = frozenset({
    "checkpoint_timeout", "max_wal_size", "min_wal_size", "checkpoint_completion_target",
    "checkpoint_flush_after", "checkpoint_warning"})
#: name prefixes of knobs with memory (the background writer, autovacuum)
MEMORY_PREFIXES = ("bgwriter_", "autovacuum")

# the knob classes (:func:`knob_class`) and the comparison-wide conditions
SESSION = "session"
SYSTEM_WIDE = "system-wide"
MEMORY_PRESSURE = "memory-pressure"
RELOAD = "reload"
RESTART = "restart"
MEMORY = "memory"

#: why a switchback cannot carry a knob with memory, with what was measured
#: (``benchmarks/results/memory_knobs.carry.md``: pgbench TPC-B, max_wal_size 32MB → 1GB)
MEMORY_SWITCHBACK = ("its effect plays out over a cycle longer than a slice (max_wal_size "
                     "32MB→1GB under pgbench TPC-B: the first 3 s after the switch still wrote "
                     "8,974 B of WAL per transaction, the old setting's 9,505 B against the "
                     "new one's 1,627 B, and took 30 s to come within 25 % of it)")

#: knob class → design → None (the design carries a difference in such a knob) or why not,
#: with what was measured. A table, not code: a new measurement changes a cell.
VALIDITY: Mapping[str, Mapping[str, str | None]] = {
    SESSION: {PER_TRANSACTION: None, SWITCHBACK: None, DUET: None, WINDOWS: None},
    SYSTEM_WIDE: {
        PER_TRANSACTION: "it has a system-wide side per-transaction latency does not see "
                         "(parallel workers 2→0 read 0.77× per transaction and 1.22× in "
                         "whole-server windows)",
        SWITCHBACK: None, DUET: None, WINDOWS: None},
    MEMORY_PRESSURE: {
        PER_TRANSACTION: "a candidate's work memory takes over 40 % of the online memory "
                         "budget: per transaction it holds only its share of the transactions, "
                         "so the server does not feel its pressure (work_mem 64kB→4MB in "
                         "512 MB: 1.13× per transaction, 0.95× in windows)",
        SWITCHBACK: None, DUET: None, WINDOWS: None},
    RELOAD: {
        PER_TRANSACTION: "SET LOCAL needs the pg_settings context 'user' or 'superuser'",
        SWITCHBACK: None, DUET: None, WINDOWS: None},
    RESTART: {
        PER_TRANSACTION: "SET LOCAL needs the pg_settings context 'user' or 'superuser'",
        SWITCHBACK: "a switchback switches by reload, not restart",
        DUET: None, WINDOWS: None},
    MEMORY: {
        PER_TRANSACTION: "SET LOCAL needs the pg_settings context 'user' or 'superuser'",
        SWITCHBACK: MEMORY_SWITCHBACK,
        DUET: None, WINDOWS: None},
}

#: design → the conditions on the workload and servers it needs: the attributes of
#: :class:`Comparison` that must be None
REQUIREMENTS: Mapping[str, tuple[str, ...]] = {
    PER_TRANSACTION: ("driver", "replicas"),
    SWITCHBACK: ("switch_driver", "replicas"),
    DUET: ("clone", "replicas"),
    WINDOWS: (),
}


def differing_knobs(configs: Sequence[Mapping[str, str]]) -> list[str]:
    """The knobs whose value is not the same in every configuration (absent counts as a
    value)."""
    names = sorted({n for c in configs for n in c})
    return [n for n in names if len({c.get(n) for c in configs}) > 1]


def has_memory(name: str) -> bool:
    """Whether knob ``name`` carries state across a switch (:data:`MEMORY_KNOBS`)."""
    return name in MEMORY_KNOBS or name.startswith(MEMORY_PREFIXES)


def knob_class(name: str, context: str) -> str:
    """The class of knob ``name`` whose pg_settings context is ``context`` (a knob the
    catalog does not know counts as restart-time: nothing lighter is known to change it;
    a knob with memory that a reload changes is of that class)."""
    if has_memory(name) and context in RELOAD_CONTEXTS:
        return MEMORY
    if context in SESSION_CONTEXTS:
        return SYSTEM_WIDE if name in SYSTEM_WIDE_KNOBS else SESSION
    return RELOAD if context == "sighup" else RESTART


@dataclass(frozen=True)
class Comparison:
    """What the choice of a design depends on, for one comparison.

    ``contexts``: each knob that differs between the configurations, its pg_settings
    context; ``memory_pressure``: why a candidate's work memory is past the line (None: it is
    not); ``driver``: why the workload has no per-transaction driver (None: it has one);
    ``switch_driver``: why a switchback cannot run it (None: it can: a driver, or live
    traffic read from counters); ``replicas``: why the comparison spans several
    servers; ``clone``: why no clone of the server can run beside it for a duet (None: one
    can; never for live traffic)."""

    contexts: Mapping[str, str] = field(default_factory=dict)
    memory_pressure: str | None = None
    driver: str | None = None
    switch_driver: str | None = None
    replicas: str | None = None
    clone: str | None = None

    def classes(self) -> dict[str, list[str]]:
        """Knob class → the differing knobs of that class (memory pressure as a class)."""
        out: dict[str, list[str]] = {}
        for name, context in sorted(self.contexts.items()):
            out.setdefault(knob_class(name, context), []).append(name)
        if self.memory_pressure is not None:
            out.setdefault(MEMORY_PRESSURE, [])
        return out


def reason_against(design: str, comparison: Comparison) -> str | None:
    """Why ``design`` cannot measure ``comparison`` (None: it can)."""
    for attr in REQUIREMENTS[design]:
        if (why := getattr(comparison, attr)) is not None:
            return why
    for klass, names in comparison.classes().items():
        why = VALIDITY[klass][design]
        if why is None:
            continue
        if klass == MEMORY_PRESSURE:
            return comparison.memory_pressure or why
        contexts = ", ".join(f"{n} ({comparison.contexts[n]!r})" for n in names)
        return f"{contexts} differ{'s' if len(names) == 1 else ''}: {why}"
    return None


@dataclass(frozen=True)
class Choice:
    """The design chosen for a comparison, and why each more precise one was not."""

    design: str
    requested: str
    passed_over: tuple[tuple[str, str], ...] = ()

    @property
    def universal(self) -> bool:
        """Whether the design chosen is the one valid for every comparison (windows): the
        fallback of the others, and the second stage of a split or a narrowing."""
        return self.design == UNIVERSAL

    @property
    def carries_restart(self) -> bool:
        """Whether the design chosen carries a restart-time difference itself (duet,
        windows): a race in it is never split, its restart part would gain nothing."""
        return self.design in VALIDITY[RESTART] and VALIDITY[RESTART][self.design] is None

    @property
    def clones(self) -> bool:
        """Whether the design chosen runs beside a clone of the server (duet)."""
        return "clone" in REQUIREMENTS.get(self.design, ())

    def why_no_clone(self) -> str | None:
        """Why a design that runs beside a clone was passed over (None: none was)."""
        return next((why for design, why in self.passed_over
                     if "clone" in REQUIREMENTS.get(design, ())), None)

    @property
    def per_transaction(self) -> bool:
        """Whether the design chosen runs every configuration per transaction in one run
        (what a search session, the screening and a narrowing's first stage run)."""
        return self.design == PER_TRANSACTION

    def text(self) -> str:
        """One line for the decisions and the plan."""
        head = (f"{self.design}, the most precise design valid here" if self.requested == AUTO
                else f"{self.design} (measure.design: {self.requested})")
        if not self.passed_over:
            return head
        return head + "; " + "; ".join(f"not {d}: {why}" for d, why in self.passed_over)


def universal_requested(requested: str) -> bool:
    """Whether ``measure.design`` asks for the universal design (windows) itself."""
    return requested == UNIVERSAL


def check_request(requested: str, where: str = "measure.design") -> str:
    """``requested`` when ``measure.design`` accepts it, else a :class:`ConfigError`."""
    if requested not in REQUESTS:
        raise ConfigError(f"{where} must be one of {', '.join(REQUESTS)}, but got "
                          f"{requested!r}")
    return requested


def choose(comparison: Comparison, requested: str = AUTO,
           designs: Sequence[str] = PRECISION) -> Choice:
    """The most precise of ``designs`` (a subset of :data:`PRECISION`, e.g. the designs a
    search can run) valid for ``comparison``, from ``requested`` down (``auto``: from the
    most precise); windows when none of them is."""
    check_request(requested)
    order = [d for d in PRECISION if d in designs]
    if requested != AUTO:
        order = order[order.index(requested):] if requested in order else [WINDOWS]
    passed: list[tuple[str, str]] = []
    for design in order:
        why = reason_against(design, comparison)
        if why is None:
            return Choice(design, requested, tuple(passed))
        passed.append((design, why))
    return Choice(WINDOWS, requested, tuple(passed))
