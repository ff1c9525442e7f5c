"""The duet's second cluster: a copy of the server's data on this host, made by
``pg_basebackup`` (the server keeps running) into a scratch directory after checking the disk,
started on a free port by the same unprivileged user as the embedded cluster, and removed at
the end. A record of it is made durable before the copy begins
(:mod:`tuner_client.crashsafe.clones`), so a tuner killed at any instant leaves nothing of it:
the guard stops it and deletes the directory.

Works for the embedded cluster and for a server by DSN whose role may replicate and whose
``pg_hba.conf`` lets this host in for replication (both on this host's PostgreSQL major
version); anything else is a clear error, and the race then runs in another design.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.crashsafe.clones import CloneRecord, new_record, remove_clone
from tuner_client.servers.cluster_files import prepare_state_dir, write_hba
from tuner_client.servers.local_cluster import LocalCluster

logger = logging.getLogger(__name__)

#: free disk a clone needs, as a multiple of the data it copies (WAL streamed beside it)
DISK_HEADROOM = 1.2
#: how long a reload may take to show a postmaster knob as pending (s)
RELOAD_WAIT_S = 2.0
#: where clones are made when no directory is named (``HARMONY_CLONE_DIR``)
CLONE_DIR_VARIABLE = "HARMONY_CLONE_DIR"


def default_clone_parent() -> Path:
    """The directory scratch clones go under (``HARMONY_CLONE_DIR``, else ``/var/tmp``: a
    disk, unlike a tmpfs ``/tmp``)."""
    return Path(os.environ.get(CLONE_DIR_VARIABLE) or "/var/tmp")


def data_bytes(dsn: str) -> int:
    """The bytes of every database of the server at ``dsn`` (what a base backup copies,
    WAL aside)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT sum(pg_database_size(oid))::bigint FROM pg_database"
                               ).fetchone()
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot read the data size of {dsn} for its clone: {exc}") from exc
    return int(row[0]) if row and row[0] is not None else 0


def check_disk(parent: Path, size: int, source: str) -> int:
    """The bytes a clone of ``size`` bytes needs in ``parent``; ConfigError when the disk
    there has less free."""
    need = int(size * DISK_HEADROOM)
    free = shutil.disk_usage(parent).free
    if free < need:
        raise ConfigError(
            f"a duet's clone of {source} needs {_mib(need)} free in {parent} "
            f"({_mib(size)} of data × {DISK_HEADROOM}), but only {_mib(free)} "
            f"is free there; free space or point {CLONE_DIR_VARIABLE} at a larger disk")
    return need


#: memory a clone takes beyond its shared_buffers (its processes, its clients' work memory)
CLONE_OVERHEAD_BYTES = 64 * 2 ** 20


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(shared_buffers: int, source: str) -> int:
    """The bytes a clone running with ``shared_buffers`` needs beside the server;
    ConfigError when the host has less available (its page cache counted as available)."""
    need = shared_buffers + CLONE_OVERHEAD_BYTES
    free = available_memory()
    if free is not None and free < need:
        raise ConfigError(
            f"a duet's clone of {source} needs about {_mib(need)} of memory beside the "
            f"server (its shared_buffers {_mib(shared_buffers)} and "
            f"{_mib(CLONE_OVERHEAD_BYTES)} more), but only {_mib(free)} is available")
    return need


@dataclass
class Clone:
    """A running scratch copy of a server (see the module docstring)."""

    cluster: LocalCluster
    record: CloneRecord
    source: str
    size_bytes: int
    setup_s: float

    def dsn_like(self, dsn: str) -> str:
        """``dsn`` pointed at the clone (same database and role; the clone trusts 127.0.0.1)."""
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        params.update(host="127.0.0.1", port=str(self.cluster.port))
        for key in ("hostaddr", "password", "passfile", "sslmode"):
            params.pop(key, None)
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()
                                                 if v is not None})

    def apply(self, settings: dict[str, str]) -> bool:
        """Put ``settings`` in force by ``ALTER SYSTEM`` and a reload, or a restart when one
        of them waits for it; whether it restarted. (A scratch copy: its changes are not
        journaled, the clone is removed whole.)"""
        try:
            with psycopg.connect(self.cluster.dsn, autocommit=True) as conn:
                for name, value in settings.items():
                    conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)))
                conn.execute("SELECT pg_reload_conf()")
                postmaster = conn.execute(
                    "SELECT count(*) FROM pg_settings WHERE context = 'postmaster' "
                    "AND name = ANY(%s)", [list(settings)]).fetchone()
                # the postmaster reads the file asynchronously: a postmaster knob's new value
                # shows as pending once it has (never when the value is the one in force)
                pending = False
                deadline = time.monotonic() + (RELOAD_WAIT_S if postmaster and postmaster[0]
                                               else 0.0)
                while not pending and time.monotonic() < deadline:
                    row = conn.execute("SELECT count(*) FROM pg_settings "
                                       "WHERE pending_restart").fetchone()
                    pending = bool(row and row[0])
                    time.sleep(0.05)
        except psycopg.Error as exc:
            raise DatabaseError(f"could not configure the duet's clone on port "
                                f"{self.cluster.port} with {settings}: {exc}") from exc
        if pending:
            self.cluster.restart()
        return pending

    def remove(self) -> None:
        """Stop the clone and delete it (and its record)."""
        removed = remove_clone(self.record)
        self.cluster.stop()  # stopped and deleted already: only its cgroups are removed
        if not removed:
            raise DatabaseError(f"the {self.record.describe()} could not be removed; its "
                                f"record {self.record.path} stays for the guard or "
                                f"`harmony restore`")


def make_clone(source_dsn: str, *, journals: Path, mark: str,
               parent: Path | None = None, os_user: str | None = None,
               memory_limit_bytes: int | None = None) -> Clone:
    """Copy the server at ``source_dsn`` (its role may replicate) into a scratch directory
    under ``parent``, after checking the disk, and start it; its record goes into
    ``journals`` (with the run's ``mark``) before anything is copied. With
    ``memory_limit_bytes`` (the embedded cluster's ``database.memory_limit``) the clone runs
    in a memory cgroup of its own with that limit, the copy made inside it too (its page
    cache charged there, not to the tuner): the clone measures the server's machine."""
    started = time.monotonic()
    parent = parent or default_clone_parent()
    parent.mkdir(parents=True, exist_ok=True)
    size = data_bytes(source_dsn)
    check_disk(parent, size, _describe(source_dsn))
    scratch = Path(tempfile.mkdtemp(prefix="harmony-clone-", dir=parent))
    record = new_record(journals, scratch, scratch / "data", _describe(source_dsn), mark)
    record.save()
    cluster: LocalCluster | None = None
    try:
        cluster = LocalCluster(scratch, os_user=os_user, timeout_s=120.0,
                               memory_limit_bytes=memory_limit_bytes)
        pw = pwd.getpwnam(cluster.os_user) if cluster.os_user else None
        prepare_state_dir(cluster.state_dir, cluster.socket_dir, cluster.log_path, pw)
        # every directory the next step may make is named durably before it does (a kill
        # in between leaves nothing no record names), then only those it made
        planned = [str(cg) for cg in cluster.planned_cgroups()]
        if planned:
            record.cgroups = planned
            record.save()
        cluster.enter_cgroups()
        record.cgroups = [str(cg) for cg in cluster.cgroup_paths()]
        if planned:  # durable before anything runs in them
            record.save()
        done = cluster.run([str(cluster.bin_dir / "pg_basebackup"), "-D", str(cluster.data_dir),
                            "-d", source_dsn, "-X", "stream", "-c", "fast", "--no-sync"],
                           timeout_s=3600, cgroup=True)
        if done.returncode != 0:
            raise DatabaseError(
                f"pg_basebackup of {_describe(source_dsn)} failed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-800:]}; a duet needs a role that may "
                f"replicate and a pg_hba.conf 'replication' line for this host")
        write_hba(cluster.data_dir, pw)
        cluster.init()  # the copy exists: only the port and socket are written
        cluster.start()
    except BaseException:
        with contextlib.suppress(Exception):
            remove_clone(record)
            if cluster is not None:
                cluster.stop()
        raise
    clone = Clone(cluster, record, _describe(source_dsn), size, time.monotonic() - started)
    logger.info("duet: cloned %s (%s) into %s in %.1f s, on port %d", clone.source,
                _mib(size), scratch, clone.setup_s, cluster.port)
    return clone


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:,.0f} MiB"


def _describe(dsn: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    return f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
