"""Every CLI option's default can come from the environment: ``HARMONY_<NAME>``."""

from __future__ import annotations

import os


def env_default(name: str, default: str | None = None) -> str | None:
    """A CLI option's default read from ``HARMONY_<NAME>`` (every option has one)."""
    return os.environ.get(f"HARMONY_{name.upper()}", default)
