"""What plugin tests share: a plain session value object (the part of a session plugins see)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harmony_base.space import Space
from plugins.base import HistoryEntry


@dataclass
class SessionView:
    """A plain session value object with what plugins may see."""

    space: Space
    name: str = "test"
    seed: int = 0
    maximize: bool = False
    replaying: bool = False
    entries: list[HistoryEntry] = field(default_factory=list)

    def history(self) -> list[HistoryEntry]:
        return list(self.entries)
