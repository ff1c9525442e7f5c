"""Named registries of extension classes (strategies, plugins, controllers).

A base class owns one :class:`Registry`; each concrete subclass adds itself by name from
``__init_subclass__`` (``class NelderMead(Strategy, name="nelder-mead")``), and third parties
add theirs through an entry-point group. :meth:`Registry.build` is the one place a name from
a user's configuration becomes an instance.
"""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(dict[str, type[T]], Generic[T]):
    """Classes of one kind by name: a plain mapping, plus :meth:`add`, :meth:`get_class`
    and :meth:`build`.

    ``what`` names the kind in messages ("strategy", "plugin", "controller kind");
    ``group`` is the entry-point group loaded when a name is not (yet) registered.
    """

    def __init__(self, what: str, *, group: str | None = None) -> None:
        super().__init__()
        self.what = what
        self.group = group

    def add(self, name: str, cls: type[T]) -> None:
        """Register ``cls`` under ``name``; a second, different class under it is an error."""
        if name in self and self[name] is not cls:
            raise ConfigError(f"{self.what} {name!r} is registered twice "
                              f"({self[name].__qualname__} and {cls.__qualname__})")
        self[name] = cls

    def load_entry_points(self) -> None:
        """Import the third-party classes registered in the entry-point group."""
        if self.group is not None:
            for ep in entry_points(group=self.group):
                ep.load()

    def get_class(self, name: str) -> type[T]:
        """The class registered under ``name``; :class:`ConfigError` listing the known names."""
        if name not in self:
            self.load_entry_points()
        try:
            return self[name]
        except KeyError:
            raise ConfigError(f"unknown {self.what} {name!r}; known: "
                              f"{', '.join(sorted(self))}") from None

    def build(self, name: str, *args: Any, **options: Any) -> T:
        """An instance of the class registered under ``name``.

        Only a failure to bind the arguments to the constructor's signature (an unknown or
        missing option) becomes :class:`ConfigError`; an error raised *inside* the
        constructor, a ``TypeError`` included, propagates as it is.
        """
        cls = self.get_class(name)
        try:
            _bind(cls, args, options)
        except TypeError as exc:
            raise ConfigError(f"{self.what} {name!r}: bad options {sorted(options)}: "
                              f"{exc}") from None
        return cls(*args, **options)


def _bind(cls: type, args: tuple[object, ...], options: JSONObject) -> None:
    """Bind ``args``/``options`` to ``cls``'s constructor (``TypeError`` when they do not
    fit). Options a constructor takes through ``**kwargs`` are bound, in turn, to the next
    constructor up the class hierarchy, which is where such a subclass forwards them
    (``super().__init__(space, seed=seed, **options)``)."""
    signature = inspect.signature(cls)
    bound = signature.bind(*args, **options)
    var_kw = next((p.name for p in signature.parameters.values()
                   if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    if var_kw is None or not bound.arguments.get(var_kw):
        return
    base = next((b for b in cls.__mro__[1:] if "__init__" in vars(b)), None)
    if base is None or base is object:
        return
    shared = {k: v for k, v in options.items()
              if k in inspect.signature(base).parameters and k in signature.parameters}
    _bind(base, args, {**shared, **bound.arguments[var_kw]})
