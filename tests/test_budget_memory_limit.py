"""The OS reserve under ``database.memory_limit``: the limit bounds a memory cgroup holding
PostgreSQL and its page cache alone, so the default 512MB reserve (for the OS and other
programs, outside the cgroup) shrinks to a tenth of the limit; a reserve given stays."""

from __future__ import annotations

from tuner_client.budget.view import os_reserve
from tuner_client.config import tuner_config_from_dict
from tuner_client.plan.planner import make_plan

MIB = 2 ** 20


def _config(**budget: object) -> dict[str, object]:
    raw: dict[str, object] = {"name": "t", "database": {"memory_limit": "1GB"},
                              "workload": {"pgbench": {"scale": 1,
                                                       "builtin": "select-only"}}}
    if budget:
        raw["budget"] = budget
    return raw


def test_the_reserve_is_a_tenth_of_the_limit_unless_given() -> None:
    limited = tuner_config_from_dict(_config())
    assert os_reserve(limited, 1024 * MIB) == 102 * MIB
    given = tuner_config_from_dict(_config(os_reserved="512MB"))
    assert os_reserve(given, 1024 * MIB) == 512 * MIB
    # the RAM named in the budget, or a machine without a limit: the reserve as configured
    named = tuner_config_from_dict(_config(ram="1GB"))
    assert os_reserve(named, 1024 * MIB) == 512 * MIB
    unlimited = tuner_config_from_dict({"name": "t", "workload": {"pgbench": {"scale": 1}}})
    assert os_reserve(unlimited, 24 * 1024 * MIB) == 512 * MIB


def _shared_buffers_range(raw: dict[str, object]) -> str:
    plan = make_plan(tuner_config_from_dict(raw))
    return next(k.after_budget for k in plan.knobs if k.name == "shared_buffers")


def test_a_1gb_limit_lets_shared_buffers_reach_half_of_it() -> None:
    # a real embedded cluster in the plan: 512MB of 1GB reserved had capped it at 296MB
    assert _shared_buffers_range(_config()).endswith("512MB")
    assert _shared_buffers_range(_config(os_reserved="512MB")).endswith("296MB")
