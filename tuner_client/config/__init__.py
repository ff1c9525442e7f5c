"""The PostgreSQL tuner's configuration file: schema, defaults, and the frozen config object.

A tuner config YAML names the database (a DSN, or none for the embedded local cluster),
the workload, how to measure, the memory budget, the offline and online knobs with ranges
in units (``32MB``..``2GB``), the strategies, evaluation budgets and the flow. Unknown keys
are errors naming the file and line. Knob ranges are checked against the live server's
``pg_settings`` later, by :func:`resolve_knob_space`, once a connection exists.

One module per idea: :mod:`.schema` (the JSON Schema), :mod:`.defaults` (built-in knob
ranges and memory constants), :mod:`.units` (sizes such as ``'64MB'``), :mod:`.model` (the
typed config dataclasses), :mod:`.parse` (YAML to typed config) and :mod:`.knobspace` (knob
specs resolved against ``pg_settings`` into a search space). Everything public is
re-exported here, so ``from tuner_client.config import X`` is the import to use.
"""

from tuner_client.config.defaults import (
    DEFAULT_OFFLINE_KNOBS,
    DEFAULT_ONLINE_KNOBS,
    DEFAULT_PROCESS_MEMORY,
    KNOWN_RANGES,
)
from tuner_client.config.knobspace import KnobParam, KnobSpace, resolve_knob_space
from tuner_client.config.model import (
    BudgetConfig,
    ControllerConfig,
    DatabaseConfig,
    FinalConfig,
    FlowConfig,
    GuardConfig,
    KnobSpec,
    MeasureConfig,
    ObserveConfig,
    ProbeConfig,
    ReplicasConfig,
    ReplicaTarget,
    ScreeningConfig,
    SessionConfig,
    TunerConfig,
    WarmStartConfig,
    WorkloadConfig,
)
from tuner_client.config.parse import load_tuner_config, parse_tuner_config, tuner_config_from_dict
from tuner_client.config.schema import TUNER_SCHEMA
from tuner_client.config.units import format_bytes, parse_bytes

__all__ = [
    "DEFAULT_OFFLINE_KNOBS",
    "DEFAULT_ONLINE_KNOBS",
    "DEFAULT_PROCESS_MEMORY",
    "KNOWN_RANGES",
    "TUNER_SCHEMA",
    "BudgetConfig",
    "ControllerConfig",
    "DatabaseConfig",
    "FinalConfig",
    "FlowConfig",
    "GuardConfig",
    "KnobParam",
    "KnobSpace",
    "KnobSpec",
    "MeasureConfig",
    "ObserveConfig",
    "ProbeConfig",
    "ReplicaTarget",
    "ReplicasConfig",
    "ScreeningConfig",
    "SessionConfig",
    "TunerConfig",
    "WarmStartConfig",
    "WorkloadConfig",
    "format_bytes",
    "load_tuner_config",
    "parse_bytes",
    "parse_tuner_config",
    "resolve_knob_space",
    "tuner_config_from_dict",
]
