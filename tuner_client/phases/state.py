"""The run's state passed between the phases: what is fixed once prepared, and what is learnt.

:class:`RunContext` is established by :mod:`tuner_client.phases.prepare` and only read
afterwards (the measurer changes the server, not the context). :class:`RunState` is the run's
ledger: every measured record, the best so far, the decisions, the sessions opened. The
phases read its fields and append to it through its methods (:func:`record_point`,
:meth:`RunState.decide`, :meth:`RunState.open_session`, ...); no module but this one assigns
a field (``tests/test_architecture.py`` counts the writes, with
:func:`benchmarks.design_metrics.measure_state`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from harmony_base.jsontypes import JSONObject
from harmony_core.priordata import PriorSession
from tuner_client.api.client import HarmonyClient, Session
from tuner_client.budget import BudgetView
from tuner_client.config import KnobSpace, TunerConfig
from tuner_client.measurer import ApplyOutcome, Measurer, PointRecord, objective_unit
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.decisions import Decision, render
from tuner_client.plan.managed import ManagedRun
from tuner_client.plan.proposals import Proposal
from tuner_client.replicas import ReplicaPool
from tuner_client.servers.target import Target
from tuner_client.stats.ledger import Ledger, Standing, interval_variance
from tuner_client.stats.screening import Screening

logger = logging.getLogger(__name__)

@dataclass
class RunContext:
    """What every phase after ``prepare`` reads: the config, the server and its measurer,
    the pool of replicas it measures on (of one without replicas), the two knob spaces, the
    memory budget and the original configuration."""

    config: TunerConfig
    run_id: str
    client: HarmonyClient
    target: Target
    measurer: Measurer
    budget: BudgetView
    offline_space: KnobSpace
    online_space: KnobSpace
    #: the tuned knobs' values before the run (PostgreSQL strings with units)
    original: dict[str, str]
    metrics: TunerMetrics
    #: every database the run measures on; the first is ``target`` with ``measurer``
    pool: ReplicaPool
    #: bytes of the user relations and indexes (the BME fit's P* estimate), if known
    relpages_bytes: int | None = None
    priors: list[PriorSession] = field(default_factory=list)
    #: what the workload's statistics showed when ``online.knobs: auto`` chose the knobs
    knob_proposals: list[Proposal] = field(default_factory=list)
    #: managed mode's facts (:mod:`tuner_client.plan.managed`); None: the tuner may change
    #: the server
    managed: ManagedRun | None = None

    def narrow_online(self, names: list[str]) -> None:
        """Search only ``names`` online (the knob screening's choice): the others are fixed at
        the values in force (the budget counts them as fixed)."""
        narrowed = KnobSpace(tuple(p for p in self.online_space.params if p.name in names))
        self.online_space = narrowed
        self.budget = replace(self.budget, online=narrowed)

    @property
    def unit(self) -> str:
        """The objective's unit, as logs and outputs print its values (live mode: × the
        original's speed)."""
        return objective_unit(self.config.measure.estimator, self.config.workload.kind)

    def current(self, names: list[str]) -> dict[str, str]:
        """The values in force of ``names``."""
        return {n: self.measurer.in_force[n] for n in names}

    def budget_violation(self, settings: Mapping[str, str]) -> str | None:
        """Why ``settings``, applied over what is in force, break the memory budget (every
        inequality checked), or None."""
        wanted = {**self.measurer.in_force, **settings}
        return self.budget.violation(wanted, wanted)

    def budget_slack(self, settings: Mapping[str, str]) -> int | None:
        """Bytes ``settings``, applied over what is in force, leave under the tightest budget
        inequality (None when a budget knob cannot be read)."""
        return self.budget.slack({**self.measurer.in_force, **settings})

    def apply(self, settings: Mapping[str, str], *, check_budget: bool = True,
              warm_up: bool = True) -> ApplyOutcome:
        """Put ``settings`` in force on every database of the run (:meth:`ReplicaPool.apply`)
        and export them; the outcome on the run's own database. In managed mode nothing is
        put in force server-wide (every comparison runs per transaction): unchanged."""
        if self.managed is not None:  # per transaction only: nothing is put in force
            return ApplyOutcome(changed=False)
        outcome = self.pool.apply(dict(settings), check_budget=check_budget, warm_up=warm_up)
        self.in_force_changed()
        return outcome

    def in_force_changed(self) -> None:
        """Export the knobs now in force and the budget slack they leave (after an apply or a
        measurement, which applies its configuration itself)."""
        in_force = self.measurer.in_force
        self.metrics.set_knobs(in_force)
        slack = self.budget.slack(in_force)
        if slack is not None:
            self.metrics.set_budget_slack(slack)


@dataclass
class RunState:
    """What the run has learnt: records, the best one, the decisions, the sessions."""

    records: list[PointRecord] = field(default_factory=list)
    #: the decisions as sentences (:func:`tuner_client.phases.decisions.render`), in order
    decisions: list[str] = field(default_factory=list)
    #: the same decisions as records (``summary.json``'s ``decision_records``)
    decision_records: list[Decision] = field(default_factory=list)
    best: PointRecord | None = None
    #: the configuration ``best.ratio`` is relative to (None: not measured against one)
    best_against: dict[str, str] | None = None
    #: records before this index were measured under an earlier workload (a shift)
    ranked_from: int = 0
    sessions: list[tuple[Session, str]] = field(default_factory=list)  # (session, kind)
    #: the BME fit of the offline measurements (parameters in bytes, r2, points), if any
    bme: JSONObject | None = None
    #: every BME probe decision of the run (``bme.probe_decision.ProbeDecision.to_dict``
    #: plus the pass label, the probes' cost and the search window), in order
    probe_decisions: list[JSONObject] = field(default_factory=list)
    #: the BME advice's recommended configuration, when it gave one
    recommended: dict[str, str] | None = None
    #: the knob screening's ranking (``tuner_client.stats.screening.Screening``), if any
    screening: Screening | None = None
    #: the screening's predicted best configuration (every tuned knob), a final candidate
    screened: dict[str, str] | None = None
    passes: int = 0
    #: a duet of this run (a search's) wrote the workload to the user's twin: both servers
    #: have grown since the run's start, so a later duet compares only their relations
    twin_written: bool = False
    #: every paired measurement's ratio carried to the original (:mod:`tuner_client.stats.ledger`)
    ledger: Ledger | None = None
    on_record: Callable[[PointRecord], None] | None = None
    #: called with every measured record (search, screening and final rounds alike)
    on_measured: Callable[[PointRecord], None] | None = None
    on_decision: Callable[[str], None] | None = None

    def wrote_twin(self) -> None:
        """A duet of this run wrote the workload to the user's twin (:attr:`twin_written`)."""
        self.twin_written = True

    def decide(self, record: Decision) -> None:
        """Record a decision of the run (shown in the summary and the log, in the words
        :func:`~tuner_client.phases.decisions.render` gives it)."""
        text = render(record)
        self.decision_records.append(record)
        self.decisions.append(text)
        logger.info("decision: %s", text)
        if self.on_decision is not None:
            self.on_decision(text)

    def start_pass(self, n: int) -> None:
        """Pass ``n`` of the flow begins."""
        self.passes = n

    def open_session(self, session: Session, kind: str) -> None:
        """Keep ``session`` (of ``kind``) among the run's sessions, once."""
        if all(s.name != session.name for s, _ in self.sessions):
            self.sessions.append((session, kind))

    def note_probe_decision(self, meta: JSONObject) -> None:
        """A BME probe decision (with its pass, cost and window): kept in order, and the
        summary's ``bme`` until a throughput fit replaces it (a flat curve decides "no knee"
        without a fit: the summary carries the decision all the same, issue 31)."""
        self.probe_decisions.append(meta)
        self.bme = meta

    def note_bme_fit(self, meta: JSONObject) -> None:
        """The BME fit of the offline measurements (``meta``): the summary's ``bme``, the
        probes' decision before it kept beside it."""
        probed = self.bme if self.bme is not None and self.bme.get("source") == "probes" \
            else None
        self.bme = {**meta, "source": "throughput",
                    **({"probe_decision": probed} if probed is not None else {})}

    def bme_metadata(self) -> JSONObject | None:
        """The BME fit and every probe decision so far, for a session's metadata (the report,
        the exported offline sessions); None without either."""
        meta: JSONObject = {}
        if self.bme is not None:
            meta["bme"] = self.bme
        if self.probe_decisions:
            meta["bme_probes"] = list(self.probe_decisions)
        return meta or None

    def recommend(self, settings: dict[str, str]) -> None:
        """The BME advice's recommended configuration."""
        self.recommended = settings

    def note_screening(self, result: Screening) -> None:
        """The knob screening's ranking."""
        self.screening = result

    def predict_best(self, settings: dict[str, str]) -> None:
        """The screening's predicted best configuration (every tuned knob): a final
        candidate."""
        self.screened = settings

    def best_or_current(self, ctx: RunContext, names: list[str]) -> dict[str, str]:
        """The best record's values of ``names``, or those in force before any."""
        if self.best is not None:
            return {n: self.best.in_force.get(n, ctx.original[n]) for n in names}
        return ctx.current(names)

    def forget_best(self) -> None:
        """A workload shift: values measured before now do not rank configurations."""
        self.best = self.best_against = None
        self.screened = None
        self.ranked_from = len(self.records)
        self.ledger = None

    def ledger_of(self, original: Mapping[str, str]) -> Ledger:
        """The run's ledger (opened on first use, over the tuned knobs of ``original``)."""
        if self.ledger is None:
            self.ledger = Ledger.of(original)
        return self.ledger

    def standing(self, record: PointRecord) -> Standing | None:
        """``record``'s configuration's ratio to the original through the ledger, if known."""
        return None if self.ledger is None else self.ledger.standing(record.in_force)

    def rank(self, record: PointRecord, reference: Mapping[str, str] | None,
             original: Mapping[str, str], *, ranks: bool = True) -> bool:
        """Put ``record``'s paired ratio to ``reference`` (the settings its ratio is relative
        to; the knobs they leave out are the record's own) in the ledger and, when ``ranks``,
        make it the best if it :func:`outranks` the best so far; whether it did."""
        against = None if reference is None else {**record.in_force, **reference}
        if against is not None and record.ratio is not None and record.failure is None:
            keep_link(self.ledger_of(original), record, against)
        if ranks and record.value is not None and outranks(
                record, against, self.best, self.best_against, list(original),
                ledger=self.ledger):
            self.best, self.best_against = record, against
            return True
        return False

    def best_among(self, records: list[PointRecord]) -> PointRecord | None:
        """The best of ``records`` as the run ranks them: the run's best when it is one of
        them (the offline phase's best and the run's best are one point), else the best
        standing in the ledger, else the highest value."""
        if any(r is self.best for r in records):
            return self.best
        done = [r for r in records if r.value is not None]
        ranked = [(score, i) for i, r in enumerate(done)
                  if self.ledger is not None
                  and (score := self.ledger.score(r.in_force)) is not None]
        if ranked:
            return done[max(ranked)[1]]
        return best_of(records)


def record_point(ctx: RunContext, state: RunState, record: PointRecord, *,
                 kind: str | None = None, ranks: bool = True,
                 reference: Mapping[str, str] | None = None) -> None:
    """Keep a finished record: the log, the metrics, and (when ``ranks``) the best so far.
    ``reference``: the settings of the configuration ``record.ratio`` is relative to (the
    session's reference; the knobs it leaves out are the record's own in force)."""
    state.records.append(record)
    ctx.metrics.record_point(record, kind=kind or evaluation_kind(record.session),
                             restarts=False)
    ctx.in_force_changed()  # the measurement put its configuration in force
    if state.rank(record, reference, ctx.original, ranks=ranks):
        logger.info("new best: %.4g %s with %s", record.value, ctx.unit, record.in_force)
    if state.best is not None:  # the metrics' best-so-far follows the run's, not the top value
        ctx.metrics.set_best(state.best)
    if ranks and state.on_record is not None:
        state.on_record(record)
    if state.on_measured is not None:
        state.on_measured(record)


def keep_link(ledger: Ledger, record: PointRecord, against: Mapping[str, str]) -> None:
    """Put ``record``'s paired ratio to ``against`` in ``ledger``: its variance from its own
    interval (per transaction), else a window's from the run's noise beside the reference
    measurements around it."""
    if len(record.reference) == 2:
        ledger.note_drift(*record.reference)
    variance = None
    if record.interval is not None:
        variance = interval_variance(*record.interval)
    ledger.add(against, record.in_force, record.ratio or 0.0, variance,
               references=max(1, len(record.reference)), session=record.session,
               design=record.design)


def outranks(record: PointRecord, against: Mapping[str, str] | None,
             best: PointRecord | None, best_against: Mapping[str, str] | None,
             names: list[str], *, ledger: Ledger | None = None) -> bool:
    """Whether ``record`` (with a value) ranks above ``best`` (None: there is none yet).
    ``against``, ``best_against``: the configurations their ratios are relative to (None:
    not measured against one), compared on ``names`` (the tuned knobs). With a ``ledger``
    that holds both configurations, their ratios to the original through it decide: the
    demo's online best read 1.215× its reference, the offline best, yet a lower level than
    an offline window minutes earlier, and never raced. The ledger ranks by its scores: each
    link shrunk toward no change by its noise, so that an evaluation read at ±100 % does
    not outrank one read at ±3 % on its luck (:meth:`~tuner_client.stats.ledger.Ledger.scores`).

    Paired ratios decide where they share a reference: measured against ``best``'s own
    configuration, ``record.ratio`` decides alone; measured against the same reference as
    ``best``, the two ratios do. A value is a ratio times its reference's level at the time,
    and levels measured minutes apart carry the drift between them: a per-transaction 1.21×
    over the incumbent once came to a value below the incumbent's own earlier window value,
    and the search kept the worse configuration (the demo's run 9, session 16); within one
    session a 1.157× trial read 6,326 queries/min against a 1.155× one's 8,871 after the
    reference's level moved. Otherwise the values decide.
    """
    if best is None:
        return True
    if ledger is not None and best is not record:
        mine, theirs = ledger.score(record.in_force), ledger.score(best.in_force)
        if mine is not None and theirs is not None:
            return mine > theirs

    def same(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
        return all(a.get(n) == b.get(n) for n in names)

    if against is not None and record.ratio is not None and best is not record:
        if same(against, best.in_force):
            return record.ratio > 1.0
        if best_against is not None and best.ratio is not None and same(against, best_against):
            return record.ratio > best.ratio
    return (record.value or 0.0) > (best.value or 0.0)


def evaluation_kind(label: str) -> str:
    """The metrics' evaluation kind of a record's session label."""
    if label.startswith("final-default"):
        return "baseline"
    if label.startswith("final"):
        return "final"
    return "offline" if "offline" in label else "online"


def best_of(records: list[PointRecord]) -> PointRecord | None:
    """The record with the highest value, or None when none has one."""
    done = [r for r in records if r.value is not None]
    return max(done, key=lambda r: r.value or 0.0) if done else None
