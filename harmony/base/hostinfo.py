"""Facts about this host, kept with sessions so later runs can match prior data to it."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any


def host_metadata() -> dict[str, Any]:
    """Hostname, CPU count, RAM, OS and Python version of this machine."""
    try:
        ram: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = None
    return {"hostname": socket.gethostname()[:255], "cpu_count": os.cpu_count(),
            "ram_bytes": ram, "os": platform.platform()[:255],
            "python": platform.python_version()}
