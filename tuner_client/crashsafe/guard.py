"""The guard: a small process that outlives the tuner and puts its servers back if it dies.

:func:`start_guard` starts it before the run's first change, in a session of its own (so a
closed terminal's SIGHUP and a kill of the tuner's process group do not reach it), holding
nothing of the tuner's (stdin, stdout and its working directory are let go). It waits on the
tuner's process (a pidfd: woken the instant the process ends, however it ends) and checks
every half second whether the run's journals still exist. When they are gone first, the run
finished and the guard exits. When the tuner ends with journals left (``kill -9``, the OOM
killer, an unhandled crash), the guard kills the processes the run started (workload clients
such as pgbench carry the run's mark in their environment), then recovers each journal
(:func:`tuner_client.crashsafe.recovery.recover`) and writes what it did to
``guard-<run>.log`` beside the journals.

Run as ``python -m tuner_client.crashsafe.guard --dir D --mark M --owner PID``. It imports
only the standard library until it must act, so it starts in a fraction of a second and costs
no more than an idle interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import tuner_client.crashsafe.clones as clones
    import tuner_client.crashsafe.journal as journal
    import tuner_client.crashsafe.recovery as recovery
else:  # imported once the guard must act: until then it idles as a bare interpreter
    clones = LazyModule("tuner_client.crashsafe.clones")
    journal = LazyModule("tuner_client.crashsafe.journal")
    recovery = LazyModule("tuner_client.crashsafe.recovery")

logger = logging.getLogger(__name__)

#: the environment variable that marks every process a run starts (its value: the run's mark)
MARK_VARIABLE = "HARMONY_RUN_MARK"
#: how often the guard looks at the journals (s)
POLL_S = 0.5
#: processes never killed as the run's leftovers even if they carry its mark: a server
#: started through a user's command may inherit the tuner's environment
SPARED = frozenset({"postgres", "postmaster", "pg_ctl", "runuser"})


def journal_paths(directory: Path, mark: str) -> list[Path]:
    """The journals in ``directory`` that the run with ``mark`` keeps (a cheap read: the
    mark is looked for as text, without parsing)."""
    needle = f'"mark": "{mark}"'
    out = []
    # a clone record (``*.clone.json``, :mod:`.clones`): a duet's scratch cluster to remove
    for path in [*directory.glob("*.journal.json"), *directory.glob("*.clone.json")]:
        with contextlib.suppress(OSError):
            if needle in path.read_text():
                out.append(path)
    return out


def marked_processes(mark: str) -> Iterator[int]:
    """Pids of this user's processes whose environment carries the run's mark."""
    needle = f"{MARK_VARIABLE}={mark}".encode() + b"\0"
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes() + b"\0" and \
                    (entry / "comm").read_text().strip() not in SPARED:
                yield int(entry.name)


def kill_marked(mark: str) -> list[int]:
    """SIGKILL every leftover process of the run (see :func:`marked_processes`)."""
    killed = []
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _wait_for_exit(pidfd: int | None, owner: int, timeout_s: float) -> bool:
    """True once the owner has ended (waits at most ``timeout_s``)."""
    if pidfd is not None:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
        return bool(ready)
    time.sleep(timeout_s)
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return journal.is_zombie(owner)


def watch(directory: Path, mark: str, owner: int) -> int:
    """Wait for the run's end; recover its journals if it died first. The exit code: 0 when
    nothing was left or everything was restored."""
    try:
        pidfd: int | None = os.pidfd_open(owner)
    except (AttributeError, OSError):
        pidfd = None
    seen = False
    while True:
        ended = _wait_for_exit(pidfd, owner, POLL_S)
        paths = journal_paths(directory, mark)
        seen = seen or bool(paths)
        if ended:
            break
        if seen and not paths:
            return 0  # the run finished and removed its journals
    killed = kill_marked(mark)
    if not paths:
        return 0
    return _recover(directory, mark, paths, killed)


def _recover(directory: Path, mark: str, paths: list[Path], killed: list[int]) -> int:
    logging.basicConfig(filename=str(directory / f"guard-{mark}.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    logger.warning("the tuner ended without its completion mark; %d leftover process(es) "
                   "killed %s; restoring %d server(s) and clone(s)", len(killed), killed,
                   len(paths))
    # the run's scratch clones first: stopped and deleted, nothing of them is the user's
    ok = clones.remove_clones(directory, mark)
    for path in paths:
        if path.name.endswith(".clone.json"):
            continue
        try:
            report = recovery.recover(journal.load_journal(path))
        except Exception as exc:  # the guard must try every journal whatever one raises
            logger.exception("could not restore from %s: %s", path, exc)
            ok = False
            continue
        ok = ok and report.ok
    return 0 if ok else 1


def start_guard(directory: Path, mark: str, owner: int | None = None) -> int:
    """Start the guard of the run with ``mark`` whose journals are in ``directory``; its pid.

    The guard is not the tuner's child: the process started here forks it and exits at once
    (waited for here), so the guard belongs to no one the tuner waits for, and nothing of the
    tuner's (its process group, its terminal, its exit) reaches it.
    """
    env = {k: v for k, v in os.environ.items() if k != MARK_VARIABLE}
    # the guard imports this project from wherever the tuner did
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    starter = subprocess.run(
        [sys.executable, "-m", "tuner_client.crashsafe.guard", "--dir", str(directory),
         "--mark", mark, "--owner", str(owner if owner is not None else os.getpid()),
         "--detach"],
        stdin=subprocess.DEVNULL, capture_output=True, cwd="/", env=env,
        start_new_session=True, close_fds=True, check=False, timeout=60)
    if starter.returncode != 0 or not starter.stdout.strip().isdigit():
        raise OSError(f"the guard did not start: {starter.stderr.decode(errors='replace')}")
    return int(starter.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tuner_client.crashsafe.guard",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, required=True, help="the journals' directory")
    parser.add_argument("--mark", required=True, help="the run's mark")
    parser.add_argument("--owner", type=int, required=True, help="the tuner's pid")
    parser.add_argument("--detach", action="store_true",
                        help="fork, print the guard's pid and return at once")
    args = parser.parse_args(argv)
    if args.detach:
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            os._exit(0)
        # the guard itself: let go of the starter's pipes
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the tuner
    return watch(args.dir, args.mark, args.owner)


if __name__ == "__main__":
    sys.exit(main())
