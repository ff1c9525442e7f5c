"""The JSON Schema of a tuner config file; unknown keys are rejected everywhere."""

from __future__ import annotations

from typing import Any

_SIZE = {"type": ["string", "integer"]}
_SIZE_OR_AUTO = {"anyOf": [{"const": "auto"}, {"type": "string"}, {"type": "integer",
                                                                   "minimum": 1}]}
_NUM_OR_STR = {"type": ["number", "string"]}
_STRATEGY = {
    "type": "object", "additionalProperties": False,
    "properties": {"name": {"type": "string", "minLength": 1}, "options": {"type": "object"}},
}
_KNOB = {
    "oneOf": [
        {"type": "null"},
        {"type": "object", "additionalProperties": False,
         "properties": {"min": _NUM_OR_STR, "max": _NUM_OR_STR, "step": _NUM_OR_STR,
                        "log": {"type": "boolean"},
                        "values": {"type": "array", "minItems": 1,
                                   "items": {"type": ["string", "number", "boolean"]}}}},
    ]
}
#: a time budget in seconds (a week at most)
_SECONDS_BUDGET = {"type": "number", "exclusiveMinimum": 0, "maximum": 604800}
_KNOBS = {
    "oneOf": [
        {"type": "object", "minProperties": 1, "additionalProperties": _KNOB,
         "propertyNames": {"pattern": r"^[a-z_][a-z0-9_.]*$"}},
        {"type": "array", "minItems": 1, "uniqueItems": True,
         "items": {"type": "string", "pattern": r"^[a-z_][a-z0-9_.]*$"}},
    ]
}
_MIX = {"oneOf": [{"type": "string", "minLength": 1},
                  {"type": "array", "minItems": 1, "items": {"type": ["string", "object"]}}]}

#: an example application the embedded cluster is loaded with (workloads.apps)
_APP = {"type": "object", "additionalProperties": False, "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1},
                       "scale": {"type": "integer", "minimum": 1}}}

_FRACTION = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
#: how the tuner restarts a server (``database.controller``, ``database.twin.controller``)
_CONTROLLER = {"type": "object", "additionalProperties": False, "required": ["kind"],
               "properties": {"kind": {"enum": ["local", "pg_ctl", "docker", "command"]},
                              "options": {"type": "object"}}}
#: live mode (``workload: {observe: ...}``): the traffic already on the server
_OBSERVE = {
    "type": ["object", "null"], "additionalProperties": False,
    "properties": {
        "min_calls": {"type": "integer", "minimum": 1},
        "min_coverage": _FRACTION,
        "poll_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 60},
        "allow_restarts": {"type": "boolean"},
        "shift_distance": _FRACTION,
        "guard": {
            "type": "object", "additionalProperties": False,
            "properties": {"latency_margin": {"type": "number", "exclusiveMinimum": 0},
                           "error_margin": _FRACTION,
                           "memory_fraction": _FRACTION,
                           "min_calls": {"type": "integer", "minimum": 1},
                           "min_coverage": _FRACTION},
        },
    },
}

#: The schema of a tuner config file (unknown keys rejected everywhere).
TUNER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Harmony PostgreSQL tuner config",
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$", "maxLength": 120},
        "description": {"type": "string"},
        "seed": {"type": "integer", "minimum": 0},
        "server": {"type": ["string", "null"]},
        "database": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "dsn": {"type": ["string", "null"]},
                "controller": _CONTROLLER,
                "memory_limit": {"type": ["string", "integer", "null"]},
                "restart_timeout_s": {"type": "number", "exclusiveMinimum": 0},
                "allow_restarts": {"type": "boolean"},
                "bin_dir": {"type": "string", "minLength": 1},
                "twin": {
                    "type": "object", "additionalProperties": False, "required": ["dsn"],
                    "properties": {"dsn": {"type": "string", "minLength": 1},
                                   "controller": _CONTROLLER},
                },
            },
        },
        "workload": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "tpch": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"scale": {"type": "number", "exclusiveMinimum": 0},
                                   "mix": _MIX, "schedule": _MIX},
                },
                "pgbench": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"scale": {"type": "integer", "minimum": 1},
                                   "clients": {"type": "integer", "minimum": 1},
                                   "builtin": {"enum": ["tpcb-like", "simple-update",
                                                        "select-only"]}},
                },
                "scripts": {  # the user's SQL (workloads.scripted)
                    "type": "object", "additionalProperties": False, "required": ["files"],
                    "properties": {
                        "files": {"type": "array", "minItems": 1,
                                  "items": {"type": "string", "minLength": 1}},
                        "clients": {"type": "integer", "minimum": 1, "maximum": 1000},
                        "writes": {"type": "boolean"},
                        "variables": {"type": "object",
                                      "additionalProperties": {"type": ["integer", "number",
                                                                        "string"]}},
                        "app": _APP,
                    },
                },
                "replay": {  # a captured workload (workloads.replay)
                    "type": "object", "additionalProperties": False, "required": ["file"],
                    "properties": {"file": {"type": "string", "minLength": 1},
                                   "clients": {"type": "integer", "minimum": 1,
                                               "maximum": 1000},
                                   "writes": {"type": "boolean"}, "app": _APP},
                },
                "observe": _OBSERVE,
                "statement_timeout_s": {"type": ["number", "null"], "exclusiveMinimum": 0},
            },
        },
        "measure": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "warmup_s": {"type": "number", "minimum": 0},
                "restart_warmup_s": {"type": ["number", "null"], "minimum": 0},
                "prewarm": {"type": "boolean"},
                "samples": {"type": "integer", "minimum": 1, "maximum": 100},
                "aggregate": {"enum": ["best", "median", "mean"]},
                "queries": {"type": ["integer", "null"], "minimum": 1},
                "seconds": {"type": ["number", "null"], "exclusiveMinimum": 0},
                "estimator": {"enum": ["count", "concurrency", "progress", "work",
                                       "work_per_cpu", "count_per_cpu"]},
                "paired": {"type": "boolean"},
                "design": {"enum": ["auto", "per-transaction", "switchback", "duet", "windows"]},
                "per_transaction_s": {"type": "number", "minimum": 10, "maximum": 600},
                "slice_s": {"type": "number", "minimum": 0.5, "maximum": 600},
                "clone": {"type": "boolean"},
            },
        },
        "budget": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "ram": _SIZE_OR_AUTO,
                "os_reserved": _SIZE,
                "connections": {"oneOf": [{"const": "auto"}, {"type": "integer", "minimum": 1}]},
                "shared_buffers_fraction": {"type": "number", "exclusiveMinimum": 0,
                                            "maximum": 1},
                "online": {"type": ["string", "integer", "null"]},
                "process_memory": _SIZE,
                "operations": {"type": "integer", "minimum": 1},
                "work_mem_held": {"type": ["number", "null"], "exclusiveMinimum": 0},
            },
        },
        "offline": {
            "type": "object", "additionalProperties": False,
            "properties": {"knobs": _KNOBS, "strategy": _STRATEGY,
                           "evaluations": {"type": "integer", "minimum": 1},
                           "seconds": _SECONDS_BUDGET,
                           "prior": {"type": "object", "additionalProperties": False,
                                     "properties": {"enabled": {"type": "boolean"},
                                                    "min_r2": {"type": "number"}}}},
        },
        "online": {
            "type": "object", "additionalProperties": False,
            "properties": {"knobs": {"oneOf": [*_KNOBS["oneOf"], {"const": "auto"}]},
                           "strategy": _STRATEGY,
                           "evaluations": {"type": "integer", "minimum": 1},
                           "seconds": _SECONDS_BUDGET},
        },
        "flow": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "kind": {"enum": ["one-pass", "multi-pass"]},
                "max_passes": {"type": "integer", "minimum": 1, "maximum": 100},
                "shift": {"type": "object", "additionalProperties": False,
                          "properties": {"outside": {"type": "integer", "minimum": 1},
                                         "margin": {"type": "number", "minimum": 0,
                                                    "exclusiveMaximum": 1},
                                         "monitor": {"type": "integer", "minimum": 0}}},
                "local_minimum": {"type": "object", "additionalProperties": False,
                                  "properties": {"threshold": {"type": "number", "minimum": 0},
                                                 "enabled": {"type": "boolean"}}},
            },
        },
        "final": {
            "type": "object", "additionalProperties": False,
            "properties": {"rounds": {"type": "integer", "minimum": 0, "maximum": 20},
                           "apply_best": {"type": "boolean"},
                           "recommended": {"type": "boolean"},
                           "candidates": {"type": "integer", "minimum": 1, "maximum": 10},
                           "max_rounds": {"type": "integer", "minimum": 2, "maximum": 50},
                           "close_call_rounds": {"type": "integer", "minimum": 2,
                                                 "maximum": 50},
                           "max_seconds": _SECONDS_BUDGET,
                           "restart_seconds": _SECONDS_BUDGET,
                           "visit_samples": {"type": "integer", "minimum": 1, "maximum": 10},
                           "until": {"enum": ["claim", "winner"]},
                           "restart_part": {"enum": ["apart", "together"]},
                           "baselines": {"type": "array", "uniqueItems": True,
                                         "items": {"enum": ["pgtune"]}},
                           "level": {"type": "number", "exclusiveMinimum": 0.5,
                                     "exclusiveMaximum": 1}},
        },
        "screening": {
            "type": "object", "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"},
                           "design": {"enum": ["oat", "pb"]},
                           "z": {"type": "number", "exclusiveMinimum": 0},
                           "replicates": {"type": "integer", "minimum": 1, "maximum": 10},
                           "samples": {"type": "integer", "minimum": 1, "maximum": 10}},
        },
        "bme": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "probes": {"type": "integer", "minimum": 0, "maximum": 12},
                "probe_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 600},
                "settle_s": {"type": "number", "minimum": 0, "maximum": 600},
                "evaluations": {"type": "integer", "minimum": 1},
                "target_miss": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                "min_r2": {"type": "number", "minimum": 0, "maximum": 1},
            },
        },
        "replicas": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 16},
                "cpu_limits": {"type": "array", "items": {"type": ["number", "null"],
                                                           "exclusiveMinimum": 0}},
                "lease_s": {"type": "number", "minimum": 5},
                "remote": {"type": "integer", "minimum": 0, "maximum": 1024},
                "targets": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "required": ["name", "dsn", "controller"],
                    "properties": {
                        "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$",
                                 "maxLength": 60},
                        "dsn": {"type": "string", "minLength": 1},
                        "controller": {
                            "type": "object", "additionalProperties": False,
                            "required": ["kind"],
                            "properties": {"kind": {"enum": ["pg_ctl", "docker", "command"]},
                                           "options": {"type": "object"}}},
                    }}},
            },
        },
        "warm_start": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {
                "from": {"type": "array", "minItems": 1,
                         "items": {"type": "string", "minLength": 1}},
                "server": {"type": "string", "minLength": 1, "pattern": "^https?://"},
            },
        },
    },
}
