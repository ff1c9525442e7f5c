"""Bearer tokens read from a file, and per-client secrets (shared by the server, the
standalone mode and the client library).

The bearer token is the server-level gate: whoever has it may use the API. A client secret
proves one client's identity within one session: ``join`` issues it, the session keeps only
its SHA-256 digest, and fetch, report, heartbeat and leave for that client must send it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from harmony_base.errors import ConfigError


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


#: the HTTP header a client's secret travels in (never in a body: bodies may be logged)
CLIENT_SECRET_HEADER = "X-Harmony-Client-Secret"


def new_client_secret() -> str:
    """A fresh client secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def secret_digest(secret: str) -> str:
    """What a session stores of a client secret: its SHA-256 digest in hex. The secret is 256
    random bits, so a fast hash suffices (there is nothing to guess by brute force)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def secret_matches(secret: str | None, digest: str) -> bool:
    """Whether ``secret`` is the one whose digest is ``digest`` (constant-time compare)."""
    return secret is not None and hmac.compare_digest(secret_digest(secret), digest)
