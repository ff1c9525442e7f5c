"""The memory budget, in one place: the inequalities the RAM (given, or
:func:`tuner_client.servers.host_memory.detect_ram_bytes`) puts on the memory knobs
(:mod:`.formula`, docs/background.md §2), and the run's view of them over the tuned knob spaces
and the settings in force (:mod:`.view`): the sessions' constraint strings, the check before
every apply (:meth:`BudgetView.violation`, which the measurer calls), the slack the metrics
show, and the room the offline pass makes for shared_buffers.
"""

from tuner_client.budget.formula import BUDGET_KNOBS, ONLINE_MEMORY_KNOBS, UNIT_BYTES, MemoryBudget
from tuner_client.budget.view import BudgetView, make_budget_view, worker_processes
from tuner_client.servers.host_memory import detect_ram_bytes, mem_total_bytes

__all__ = [
    "BUDGET_KNOBS", "ONLINE_MEMORY_KNOBS", "UNIT_BYTES", "BudgetView", "MemoryBudget",
    "detect_ram_bytes", "make_budget_view", "mem_total_bytes", "worker_processes",
]
