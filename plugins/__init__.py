"""Session plugins. Importing this package registers the built-in plugins."""

from plugins.base import (
    ACCEPT, Flow, FlowResult, HistoryEntry, Plugin, PluginTrial, SessionView, make_plugin,
)

__all__ = ["ACCEPT", "Flow", "FlowResult", "HistoryEntry", "Plugin", "PluginTrial",
           "SessionView", "make_plugin"]
