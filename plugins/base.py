"""The session plugin contract: hooks, flow results, and the plugin registry.

Plugins see a :class:`SessionView` (name, space, history, seed), never the server's
internals. The session runs them in the order the definition lists them.
"""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from harmony_base.errors import ConfigError
from harmony_base.region import FeasibleRegion
from harmony_base.registry import Registry
from harmony_base.space import Point, Space


class Flow(enum.Enum):
    """What a hook tells the session to do with the trial."""

    ACCEPT = "accept"  # go on (to the next plugin, then the client / the strategy)
    WAIT = "wait"  # not now: keep the trial queued, hand out nothing for it yet
    RETURN = "return"  # answer without measuring: ``value`` holds the answer
    RETRY = "retry"  # measure the same point again (e.g. another sample)
    REJECT = "reject"  # refuse the point; ``hint`` may propose a replacement


@dataclass
class FlowResult:
    flow: Flow
    value: float | None = None
    hint: Point | None = None
    reason: str = ""


ACCEPT = FlowResult(Flow.ACCEPT)


@dataclass
class PluginTrial:
    """One measurement as plugins see it.

    ``candidate`` is the session's candidate id (one point); ``samples`` are the raw values
    measured for this candidate so far, in the objective's own sign. In ``analyze`` a
    plugin may replace ``value`` (e.g. with an aggregate) before the strategy sees it.

    Not the session's trial record (:class:`harmony_base.trial.TrialRecord`): a plugin works
    per candidate, not per hand-out; it sees the samples gathered across trials, has no
    status or lease, and may rewrite the value, so this is a separate, mutable view.
    """

    candidate: int
    point: Point
    value: float | None = None
    failure: str | None = None
    client: str | None = None
    samples: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class HistoryEntry:
    point: Point
    value: float | None
    failure: str | None = None


class SessionView(Protocol):
    """The part of a session that plugins may see."""

    name: str
    seed: int
    maximize: bool
    #: True while the server rebuilds the session by replaying its command log; plugins with
    #: side effects outside the session (files, databases) skip them meanwhile
    replaying: bool

    @property
    def space(self) -> Space: ...

    def history(self) -> list[HistoryEntry]: ...


class Plugin:
    """Base class with no-op hooks. Register with ``class X(Plugin, name="x")``."""

    registry: ClassVar[Registry[Plugin]] = Registry("plugin", group="harmony.plugins")
    name: ClassVar[str] = ""

    def __init_subclass__(cls, name: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            Plugin.registry.add(name, cls)
            cls.name = name

    def __init__(self, session: SessionView, **options: object) -> None:
        if options:
            raise ConfigError(f"plugin {self.name!r}: unknown options {sorted(options)}")
        self.session = session

    def init(self, space: Space) -> Space:
        """Called at launch; may return a narrowed space."""
        return space

    def region(self) -> FeasibleRegion | None:
        """A feasible region for the strategy (only constraint-like plugins return one)."""
        return None

    def join(self, client: str) -> None:
        """A client joined the session."""

    def generate(self, trial: PluginTrial) -> FlowResult:
        """A point is about to be handed out."""
        return ACCEPT

    def analyze(self, trial: PluginTrial) -> FlowResult:
        """A measurement came back (``trial.value`` or ``trial.failure`` is set)."""
        return ACCEPT

    def converged(self) -> bool:
        """Whether this plugin considers the session converged (default: no opinion)."""
        return False

    def fini(self) -> None:
        """The session ends."""


def make_plugin(name: str, session: SessionView, **options: object) -> Plugin:
    """Instantiate a registered plugin by name; unknown names and options are errors."""
    # the built-ins are registered: importing this module ran plugins/__init__.py first

    cls = Plugin.registry.get_class(name)
    allowed = plugin_options(cls)
    unknown = sorted(set(options) - set(allowed)) if allowed is not None else []
    if unknown:
        raise ConfigError(f"plugin {name!r}: unknown option(s) {unknown}; "
                          f"allowed: {sorted(allowed or [])}")
    return Plugin.registry.build(name, session, **options)


def plugin_options(cls: type[Plugin]) -> list[str] | None:
    """The option names a plugin class accepts (``None`` if it takes arbitrary ``**options``)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[2:]  # self, session
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None if cls.__init__ is not Plugin.__init__ else []
    return [p.name for p in params
            if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
