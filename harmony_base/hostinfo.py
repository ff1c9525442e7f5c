"""Facts about a session's hosts, kept with sessions so later runs can match prior data to them.

:class:`HostInfo` is the one host record of the leased session, the server's store and prior
data; :func:`host_metadata` gives this machine's facts.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harmony_base.jsontypes import JSONObject


@dataclass(frozen=True)
class HostInfo:
    """A client of a session and the host it runs on (``joined``/``left``: epoch seconds)."""

    client_id: str
    joined: float | None = None
    hostname: str | None = None
    cpu_count: int | None = None
    ram_bytes: int | None = None
    os: str | None = None
    python: str | None = None
    left: float | None = None

    @classmethod
    def of(cls, client_id: str, joined: float | None, facts: Mapping[str, Any] | None = None,
           left: float | None = None) -> HostInfo:
        """A host record from the facts a client gives when it joins (unknown keys ignored)."""
        facts = facts or {}
        return cls(client_id, joined, facts.get("hostname"), facts.get("cpu_count"),
                   facts.get("ram_bytes"), facts.get("os"), facts.get("python"), left)


def host_metadata() -> JSONObject:
    """Hostname, CPU count, RAM, OS and Python version of this machine."""
    try:
        ram: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = None
    return {"hostname": socket.gethostname()[:255], "cpu_count": os.cpu_count(),
            "ram_bytes": ram, "os": platform.platform()[:255],
            "python": platform.python_version()}
