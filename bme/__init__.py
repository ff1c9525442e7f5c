"""The Buffer Miss Equation (docs/background.md §3): fitting, sizing, partitioning, fair
reclamation, target-miss control, Mattson stacks, and the BME advice for shared_buffers."""

from bme.advice import BMEAdvice, SharedBuffersAdvisor, touched_pages_p_star
from bme.equation import BMEParams, miss_probability, miss_slope
from bme.fit import BMEFit, fit_bme, fit_bme_counts
from bme.gradient import (
    ControlTrace,
    compare_control,
    direct_control,
    gradient_control,
)
from bme.mattson import miss_curve, read_trace, stack_distances, stack_histogram
from bme.partition import Partition, partition
from bme.reclaim import Reclamation, fair_reclaim
from bme.size import recommended_size, size_for_target

__all__ = [
    "BMEFit", "BMEParams", "ControlTrace", "Partition", "BMEAdvice", "Reclamation",
    "SharedBuffersAdvisor", "compare_control", "direct_control", "fair_reclaim", "fit_bme",
    "fit_bme_counts", "gradient_control", "miss_curve", "miss_probability", "miss_slope",
    "partition", "read_trace", "recommended_size", "size_for_target", "stack_distances",
    "stack_histogram", "touched_pages_p_star",
]
