"""The files of a private PostgreSQL cluster that the tuner writes itself: the state
directory (reachable and owned by the unprivileged user that runs the server), ``pg_hba.conf``
(trust on the private socket and loopback only) and ``harmony_local.conf``, the include file of
``postgresql.conf`` holding the listen address, port and socket directory.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
from pathlib import Path

from harmony_base.errors import ConfigError

logger = logging.getLogger(__name__)


def prepare_state_dir(state_dir: Path, socket_dir: Path, log_path: Path,
                      pw: pwd.struct_passwd | None) -> None:
    """Create ``state_dir`` and its socket directory, private to the server's OS user ``pw``
    (None: the tuner's own user), with every parent traversable by that user."""
    state_dir.mkdir(parents=True, exist_ok=True)
    socket_dir.mkdir(exist_ok=True)
    if pw is None:
        socket_dir.chmod(0o700)
        return
    if state_dir == Path("/root") or Path("/root") in state_dir.parents:
        raise ConfigError(
            f"state_dir {state_dir} is under /root, which the unprivileged user "
            f"{pw.pw_name!r} running PostgreSQL cannot reach; use a directory under "
            "/var/tmp or /tmp"
        )
    for parent in reversed(state_dir.parents):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            logger.warning(
                "making %s traversable (o+x) so that user %s can reach %s",
                parent, pw.pw_name, state_dir,
            )
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    uid, gid = pw.pw_uid, pw.pw_gid
    for path in (state_dir, socket_dir):
        os.chown(path, uid, gid)
        path.chmod(0o700)
    if log_path.exists():
        os.chown(log_path, uid, gid)


def write_hba(data_dir: Path, pw: pwd.struct_passwd | None) -> None:
    """``pg_hba.conf``: trust on the private socket and loopback only."""
    text = (
        "# written by harmony: trust on the private socket and loopback only\n"
        "local all all trust\n"
        "host all all 127.0.0.1/32 trust\n"
        "local replication all trust\n"
        "host replication all 127.0.0.1/32 trust\n"
    )
    _write_owned(data_dir / "pg_hba.conf", text, pw)


def write_local_conf(data_dir: Path, socket_dir: Path, port: int,
                     pw: pwd.struct_passwd | None) -> None:
    """The cluster's fixed settings in ``harmony_local.conf``, included by postgresql.conf
    (tuned knobs go to postgresql.auto.conf)."""
    conf = data_dir / "postgresql.conf"
    include_line = "include_if_exists = 'harmony_local.conf'"
    body = conf.read_text()
    if include_line not in body:
        _write_owned(conf, body.rstrip("\n") + "\n\n# harmony local cluster\n"
                     + include_line + "\n", pw)
    sock = str(socket_dir).replace("'", "''")
    _write_owned(
        data_dir / "harmony_local.conf",
        "# fixed by harmony's LocalCluster; tuned knobs go to postgresql.auto.conf\n"
        "listen_addresses = '127.0.0.1'\n"
        f"port = {port}\n"
        f"unix_socket_directories = '{sock}'\n",
        pw,
    )


def _write_owned(path: Path, text: str, pw: pwd.struct_passwd | None) -> None:
    path.write_text(text)
    if pw is not None:
        os.chown(path, pw.pw_uid, pw.pw_gid)
    path.chmod(0o600)
