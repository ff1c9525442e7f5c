"""Bearer tokens: read from a file (shared by the server and its clients)."""

from __future__ import annotations

from pathlib import Path

from harmony.base.errors import ConfigError


def read_token_file(path: str | Path) -> str:
    """The bearer token in ``path`` (first line, stripped); errors name the file."""
    p = Path(path)
    try:
        text = p.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"--token-file {p}: cannot read it: {exc.strerror}") from None
    token = text.splitlines()[0].strip() if text else ""
    if not token:
        raise ConfigError(f"--token-file {p}: the file is empty; put the token on its first line")
    return token
