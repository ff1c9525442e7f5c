"""The clone record: a scratch cluster the run made (a duet's second cluster), kept on disk
beside the restore journals so that whatever ends the tuner, the clone is stopped and removed.

The record is written and fsynced before the copy begins (a kill during the copy leaves a
partial directory the record still names), holds the scratch directory, the data directory
and the run's mark and owner, and goes once the clone is removed. :func:`remove_clone` is what
the guard (:mod:`.guard`), a later run and a normal end all call: the postmaster named in the
data directory's ``postmaster.pid`` is shut down (``SIGQUIT``: immediate, its children with
it; ``SIGKILL`` after a timeout), then the scratch directory is deleted, and the cgroups the
clone ran in (under a memory limit) once their processes are gone. Nothing in a clone is the
user's: it is a copy, and removing it loses nothing.

The standard library and :mod:`tuner_client.servers.cgroups` only: the guard imports this
when it must act.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tuner_client.crashsafe.journal import boot_id, fsync_dir, is_zombie, start_ticks
from tuner_client.servers.cgroups import remove_cgroups

logger = logging.getLogger(__name__)

SUFFIX = ".clone.json"
#: how long an immediate shutdown may take before the postmaster is killed (s)
STOP_TIMEOUT_S = 15.0


@dataclass
class CloneRecord:
    """One scratch cluster of a run (see the module docstring)."""

    path: Path
    #: the directory the clone lives in; removed whole
    scratch: str
    #: its data directory (``postmaster.pid`` names the running postmaster)
    data_dir: str
    #: what it is a clone of, for the logs
    source: str
    mark: str
    owner_pid: int
    host: str = field(default_factory=socket.gethostname)
    started: float = field(default_factory=time.time)
    #: the owner's start time in clock ticks since boot and the boot: with the pid, one
    #: process even after the pid is reused
    owner_ticks: int | None = None
    boot_id: str | None = None
    #: the cgroup directories the clone runs in (memory, CPU; made under
    #: ``database.memory_limit``), removed with it; a record written before they existed
    #: (or by an older version) names none
    cgroups: list[str] = field(default_factory=list)

    def owner_alive(self) -> bool:
        """Whether the run that made the clone still runs (a record of another host: taken
        as alive)."""
        if self.host != socket.gethostname():
            return True
        if self.boot_id is not None and self.boot_id != boot_id():
            return False
        ticks = start_ticks(self.owner_pid)
        if ticks is None or (self.owner_ticks is not None and ticks != self.owner_ticks):
            return False
        return not is_zombie(self.owner_pid)

    def save(self) -> None:
        """Write the record atomically and durably before the clone exists."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = asdict(self)
        data["path"] = str(self.path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def describe(self) -> str:
        return f"clone of {self.source} in {self.scratch} (run mark {self.mark})"


def new_record(directory: Path, scratch: Path, data_dir: Path, source: str, mark: str
               ) -> CloneRecord:
    """The record of a clone this process is about to make in ``scratch`` (not saved yet)."""
    pid = os.getpid()
    return CloneRecord(path=clone_record_path(directory, scratch), scratch=str(scratch),
                       data_dir=str(data_dir), source=source, mark=mark, owner_pid=pid,
                       owner_ticks=start_ticks(pid), boot_id=boot_id())


def clone_record_path(directory: Path, scratch: Path | str) -> Path:
    """The record file of the clone in ``scratch``."""
    digest = hashlib.sha256(str(Path(scratch).absolute()).encode()).hexdigest()[:16]
    return directory / f"{digest}{SUFFIX}"


def load_clone_record(path: Path) -> CloneRecord:
    """Read one record (ValueError naming the file when it cannot be read)."""
    try:
        data = json.loads(path.read_text())
        data["path"] = path
        return CloneRecord(**data)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"clone record {path}: cannot read it ({exc})") from exc


def clone_paths(directory: Path, mark: str | None = None) -> list[Path]:
    """The clone records in ``directory`` (of the run with ``mark``, when given)."""
    if not directory.is_dir():
        return []
    needle = None if mark is None else f'"mark": "{mark}"'
    out = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        with contextlib.suppress(OSError):
            if needle is None or needle in path.read_text():
                out.append(path)
    return out


def postmaster_pid(data_dir: Path | str) -> int | None:
    """The pid in ``data_dir/postmaster.pid`` when that process still runs, else None."""
    try:
        pid = int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return None if is_zombie(pid) else pid


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat[stat.rfind(")") + 2:].startswith("Z"):
                return True
        time.sleep(0.05)
    return False


def stop_postmaster(data_dir: Path | str, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Shut the postmaster of ``data_dir`` down at once (``SIGQUIT``, then ``SIGKILL`` of it
    and its children); True when none runs any more."""
    pid = postmaster_pid(data_dir)
    if pid is None:
        return True
    children = _children(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGQUIT)
    if _wait_gone(pid, timeout_s):
        return True
    for p in [pid, *children]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    return _wait_gone(pid, 5.0)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def remove_clone(record: CloneRecord) -> bool:
    """Stop the clone's postmaster, delete its scratch directory and its cgroups, then the
    record; True when all are done (the record stays otherwise, for the next attempt)."""
    stopped = stop_postmaster(record.data_dir)
    if not stopped:
        logger.error("the postmaster of %s did not stop; its record stays", record.describe())
        return False
    shutil.rmtree(record.scratch, ignore_errors=True)
    if Path(record.scratch).exists():
        logger.error("could not delete %s; its record stays", record.scratch)
        return False
    left = remove_cgroups(record.cgroups)
    if left:
        logger.error("could not remove the cgroups %s of %s; its record stays", left,
                     record.describe())
        return False
    with contextlib.suppress(FileNotFoundError):
        record.path.unlink()
        fsync_dir(record.path.parent)
    logger.info("removed the %s", record.describe())
    return True


def remove_clones(directory: Path, mark: str | None = None, *, dead_only: bool = False
                  ) -> bool:
    """Remove every clone the records in ``directory`` name (of the run with ``mark``, when
    given; with ``dead_only`` only those whose run has ended, as a later run or ``harmony
    restore`` does when the guard died too); True when none of those is left."""
    ok = True
    for path in clone_paths(directory, mark):
        try:
            record = load_clone_record(path)
            if dead_only and record.owner_alive():
                continue
            logger.warning("removing the %s left by a run that ended", record.describe())
            ok = remove_clone(record) and ok
        except ValueError as exc:
            logger.error("%s", exc)
            ok = False
    return ok
