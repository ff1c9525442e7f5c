"""What a config must hold in managed mode (a DSN without a controller): the run measures per
transaction only and changes nothing server-wide, so every section that would need a restart,
``ALTER SYSTEM`` or whole-server windows is refused here, naming the key."""

from __future__ import annotations

from collections.abc import Callable

from harmony_base.errors import ConfigError
from tuner_client.config.model import FinalConfig, MeasureConfig, ReplicasConfig, WorkloadConfig
from workloads.per_transaction.from_config import unsupported_reason

#: the designs managed mode may measure with (``measure.design``)
MANAGED_DESIGNS = ("auto", "per-transaction")

_WHY = ("database.dsn without database.controller is managed mode: the tuner measures per "
        "transaction (SET LOCAL) and never runs ALTER SYSTEM or restarts the server")


def check_managed(workload: WorkloadConfig, measure: MeasureConfig,
                  final: FinalConfig, replicas: ReplicasConfig,
                  where: Callable[..., str]) -> None:
    """Raise a :class:`ConfigError` naming the first key managed mode cannot honour."""
    reason = unsupported_reason(workload)
    if reason is not None:
        raise ConfigError(f"{where('workload')}: {_WHY}, so the workload needs a "
                          f"per-transaction driver (TPC-H mix, pgbench, scripts or replay), "
                          f"but {reason}; give database.controller to measure in windows")
    if measure.design not in MANAGED_DESIGNS:
        raise ConfigError(f"{where('measure', 'design')}: {_WHY}, so measure.design must be "
                          f"one of {', '.join(MANAGED_DESIGNS)}, but got {measure.design!r}")
    if final.apply_best:
        raise ConfigError(f"{where('final', 'apply_best')}: {_WHY}, so final.apply_best must "
                          f"be false; apply the written alter_database.sql or the provider's "
                          f"parameter file yourself")
    if replicas.enabled:
        raise ConfigError(f"{where('replicas')}: {_WHY}, so it tunes one server; remove the "
                          f"replicas section")
