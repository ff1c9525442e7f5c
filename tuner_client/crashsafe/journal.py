"""The restore journal: what a server must go back to if the tuner dies, kept on disk.

One JSON file per server under :func:`journal_dir` (``HARMONY_JOURNAL_DIR``, default
``/var/tmp/harmony-<uid>/journals``: kept across reboots, unlike ``/tmp``), written atomically
and fsynced (the file and its directory) before the first change to the server, and again
before each change. It holds the server's identity (system identifier, data directory, host,
port, DSN), the original ``postgresql.auto.conf`` (its text where a controller can read the
file, and always its entries as the server reads them), every setting in force, the run and
the process that owns it, how to rebuild the controller that can restart the server, and each
value the run wrote. A run that ends normally removes it (its completion mark); a journal
left behind means the run died before putting the server back.

What a server is and its original configuration are :mod:`.server_state`; how each change
reaches the journal before the server is :mod:`.hook`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject
from tuner_client.crashsafe.server_state import OriginalConfig, ServerIdentity

logger = logging.getLogger(__name__)

#: the journal's format; a newer one is reported, never guessed at
FORMAT = 1
SUFFIX = ".journal.json"


def journal_dir() -> Path:
    """Where restore journals live (``HARMONY_JOURNAL_DIR``; default under ``/var/tmp``, which
    survives a reboot)."""
    base = os.environ.get("HARMONY_JOURNAL_DIR")
    if base:
        return Path(base)
    return Path("/var/tmp") / f"harmony-{os.geteuid()}" / "journals"


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22): with
    the pid and the boot, it names one process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[19]) if len(fields) > 19 else None


def is_zombie(pid: int) -> bool:
    """Whether process ``pid`` has ended and only its zombie is left (its state ``Z`` in
    ``/proc/PID/stat``; a container's init may not reap it); False when it cannot be read."""
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rfind(")") + 2:].startswith("Z")
    return False


@dataclass(frozen=True)
class ProcessId:
    """One process on one boot of one host."""

    pid: int
    start_ticks: int | None
    boot_id: str | None
    host: str

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        return cls(pid, start_ticks(pid), boot_id(), socket.gethostname())

    @property
    def here(self) -> bool:
        """Whether the process ran on this host (only then can :meth:`alive` look)."""
        return self.host == socket.gethostname()

    def alive(self) -> bool:
        """True while this very process runs (False after a reboot). A process of another
        host (a journal directory shared between containers) cannot be looked at, so it is
        taken as alive: only ``harmony restore --force`` may act on its journal."""
        if not self.here:
            return True
        if self.boot_id != boot_id():
            return False
        ticks = start_ticks(self.pid)
        if ticks is None:
            return False
        if self.start_ticks is not None and ticks != self.start_ticks:
            return False  # the pid was reused
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{self.pid}/stat").read_text()
            if state[state.rfind(")") + 2:].startswith("Z"):
                return False  # exited, not yet reaped
        return True


@dataclass
class Journal:
    """One server's restore journal (see the module docstring); :meth:`save` makes it durable."""

    path: Path
    key: str
    run_id: str
    config: str
    owner: ProcessId
    server: ServerIdentity
    original: OriginalConfig
    #: how to rebuild the controller that restarts this server (None: reload only)
    controller: dict[str, Any] | None = None
    #: the embedded cluster is the run's own: stopped once restored, as a finished run does
    stop_after: bool = False
    #: the run's mark: in the environment of every process it starts, and how its guard
    #: finds its journals (:mod:`tuner_client.crashsafe.guard`)
    mark: str = ""
    #: each change as it was applied: {"at": unix time, "values": {knob: value or None}}
    changes: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    format: int = FORMAT
    #: the cgroup directories the embedded cluster runs in (``database.memory_limit``),
    #: removed once a recovery has stopped it (none in a journal of an older version)
    cgroups: list[str] = field(default_factory=list)

    def written(self) -> dict[str, set[str | None]]:
        """Every value this run wrote, per knob (lower case; None: reset)."""
        out: dict[str, set[str | None]] = {}
        for change in self.changes:
            for name, value in change["values"].items():
                out.setdefault(name.lower(), set()).add(value)
        return out

    def to_dict(self) -> JSONObject:
        data = asdict(self)
        data.pop("path")
        return data

    def save(self) -> None:
        """Write the journal atomically and durably: temp file, fsync, rename, fsync the
        directory (a crash at any instant leaves the old journal or the new one, whole)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.to_dict(), fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def record_change(self, values: Mapping[str, str | None]) -> None:
        """Add one change and make it durable before it is made."""
        self.changes.append({"at": time.time(), "values": dict(values)})
        self.save()

    def complete(self) -> None:
        """The completion mark: the server was put back (or left as asked); the journal goes."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            fsync_dir(self.path.parent)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return (f"restore journal {self.path}: run {self.run_id} of {self.config} (pid "
                f"{self.owner.pid} on {self.owner.host}, started {when}) on "
                f"{self.server.describe()}, {len(self.changes)} change(s) recorded")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def journal_path(directory: Path, key: str) -> Path:
    """The journal file of the server named by ``key`` (see :func:`server_key`)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return directory / f"{digest}{SUFFIX}"


def server_key(dsn: str, data_dir: Path | str | None = None) -> str:
    """A name for a server that needs no connection: its data directory when the tuner owns
    it (the embedded cluster may change port), else the DSN's host and port."""
    if data_dir is not None:
        return f"data:{Path(data_dir).absolute()}"
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    host = str(params.get("host") or params.get("hostaddr") or "/var/run/postgresql")
    host = "127.0.0.1" if host == "localhost" else host
    return f"server:{host}:{params.get('port') or 5432}"


def load_journal(path: Path) -> Journal:
    """Read one journal; ConfigError naming the file when it cannot be trusted."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"restore journal {path}: cannot read it ({exc}); move it away "
                          "once the server's configuration was checked by hand") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"restore journal {path}: format {data.get('format')!r} is not "
                          f"{FORMAT} (written by another version of harmony)")
    try:
        return Journal(path=path, key=data["key"], run_id=data["run_id"],
                       config=data["config"], owner=ProcessId(**data["owner"]),
                       server=ServerIdentity(**data["server"]),
                       original=OriginalConfig(**data["original"]),
                       controller=data.get("controller"), stop_after=data["stop_after"],
                       mark=data.get("mark", ""),
                       changes=list(data["changes"]), started=data["started"],
                       cgroups=[str(c) for c in data.get("cgroups", [])])
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"restore journal {path}: missing or malformed field "
                          f"({exc})") from exc


def find_journals(directory: Path | None = None, key: str | None = None) -> list[Journal]:
    """The journals in ``directory`` (default :func:`journal_dir`), of one server with ``key``."""
    directory = directory or journal_dir()
    if key is not None:
        path = journal_path(directory, key)
        return [load_journal(path)] if path.exists() else []
    return [load_journal(p) for p in sorted(directory.glob(f"*{SUFFIX}"))] \
        if directory.is_dir() else []
