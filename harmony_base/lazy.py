"""A module loaded on first use, so that ``harmony --help`` needs none of a command's work.

The pattern is Optuna's ``_LazyImport``: the module is imported under ``TYPE_CHECKING`` too, so
mypy types it and import-linter sees the edge (tests/test_import_direction.py checks that every
:class:`LazyModule` has that twin)::

    if TYPE_CHECKING:
        import bme.cli as bme_commands
    else:
        bme_commands = LazyModule("bme.cli")
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from dataclasses import dataclass


class LazyModule(types.ModuleType):
    """Stands for the module ``name``; the first attribute read imports it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def _load(self) -> types.ModuleType:
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return module

    def __getattr__(self, item: str) -> object:
        return getattr(self._load(), item)


@dataclass(frozen=True)
class LazyFunction:
    """The function ``name`` of a lazily loaded ``module``, looked up when a command runs:
    the command's entry point is called directly (no forwarding function of the parser's
    module on the way, ``benchmarks/trial_path.py``), and the import edge stays visible
    through the module's :class:`LazyModule` and its ``TYPE_CHECKING`` twin."""

    module: types.ModuleType
    name: str

    def resolve(self) -> Callable[..., int | None]:
        """The function itself (importing its module on first use)."""
        function: Callable[..., int | None] = getattr(self.module, self.name)
        return function
