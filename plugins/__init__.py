"""Session plugins. Importing this package registers the built-in plugins."""

from plugins.agg import AggregatePlugin
from plugins.base import (
    ACCEPT,
    Flow,
    FlowResult,
    HistoryEntry,
    Plugin,
    PluginTrial,
    SessionView,
    make_plugin,
)
from plugins.cache import CachePlugin
from plugins.constraint import ConstraintPlugin
from plugins.feasible import ConstrainedRegion
from plugins.log import LogPlugin

__all__ = ["ACCEPT", "AggregatePlugin", "CachePlugin", "ConstrainedRegion", "ConstraintPlugin",
           "Flow", "FlowResult", "HistoryEntry", "LogPlugin", "Plugin", "PluginTrial",
           "SessionView", "make_plugin"]
