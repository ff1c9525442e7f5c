"""Randomized per-transaction assignment: K configurations under comparison share one run,
each transaction (or query) drawing one at random and running under ``SET LOCAL``.

Both arms then see the same drift, co-tenants and cache state, and a minute holds thousands
of paired observations (issue 27). :mod:`tuner_client.stats.per_transaction` analyses the
:class:`Trace` these drivers record.
"""

from workloads.per_transaction.pgbench_variants import (
    PgbenchAssignment,
    Template,
    builtin_template,
    script_templates,
)
from workloads.per_transaction.settings import (
    SESSION_CONTEXTS,
    Configuration,
    check_session_settable,
    padded_set_local,
    set_local,
)
from workloads.per_transaction.streams import StreamAssignment, statement_draws, tpch_draws
from workloads.per_transaction.trace import Settled, Trace, concat

__all__ = ["SESSION_CONTEXTS", "Configuration", "PgbenchAssignment", "StreamAssignment",
           "Settled", "Template", "Trace", "builtin_template", "concat", "check_session_settable",
           "padded_set_local", "script_templates", "set_local", "statement_draws", "tpch_draws"]
