"""A private PostgreSQL cluster owned by the tuner: initdb, start, stop, restart.

The cluster listens on 127.0.0.1 only (its own port, unix socket inside the state
directory) with trust authentication for the superuser ``postgres``. When the tuner runs
as root (PostgreSQL refuses root), every server command runs as an unprivileged OS user
(default ``harmony``, created with ``useradd --system`` if missing) through ``runuser``.

Restarts are always ``pg_ctl stop`` + ``pg_ctl start`` with no ``-o`` options: options
given with ``-o`` are saved in ``postmaster.opts`` and would silently override
``ALTER SYSTEM`` on every later restart. The listen address, port and socket directory are
written into ``harmony_local.conf`` (included by ``postgresql.conf``) before every start, so
the port always matches this object's DSN; ``postgresql.auto.conf`` is left to the tuner.

Optionally the postmaster runs inside a memory cgroup (v2 ``memory.max`` or v1
``memory.limit_in_bytes``) so that the OS page cache cannot hide buffer misses, and inside a
CPU cgroup (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``) that caps it at ``cpu_limit`` CPUs,
e.g. to run a replica deliberately slower than its siblings (:mod:`tuner_client.servers.cgroups`).
Finding the server binaries and the OS user is :mod:`tuner_client.servers.pg_binaries`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import subprocess
from pathlib import Path
from types import TracebackType

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.servers import pg_binaries
from tuner_client.servers.cgroups import ServerCgroups, foreign_cgroups, remove_cgroups
from tuner_client.servers.cluster_files import prepare_state_dir, write_hba, write_local_conf

logger = logging.getLogger(__name__)


class LocalCluster:
    """A private PostgreSQL cluster in ``state_dir`` (data in ``state_dir/data``).

    Use as a context manager (``with LocalCluster(d) as c:`` initialises if needed,
    starts, and stops on exit) or call :meth:`start` / :meth:`stop` yourself.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        port: int | None = None,
        os_user: str | None = None,
        bin_dir: Path | str | None = None,
        memory_limit_bytes: int | None = None,
        timeout_s: float = 60.0,
        sync_initdb: bool = True,
        template_data_dir: Path | None = None,
        cpu_limit: float | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        self._bin_dir = pg_binaries.find_bin_dir(bin_dir)
        self._port_given = port is not None
        self._port = port if port is not None else pg_binaries.find_free_port()
        self.timeout_s = timeout_s
        self.sync_initdb = sync_initdb
        self.template_data_dir = Path(template_data_dir) if template_data_dir else None
        if memory_limit_bytes is not None and memory_limit_bytes <= 0:
            raise ConfigError(
                f"memory_limit_bytes must be a positive number of bytes, got {memory_limit_bytes}"
            )
        self.memory_limit_bytes = memory_limit_bytes
        if cpu_limit is not None and not (0.01 <= cpu_limit <= 1024):
            raise ConfigError(f"cpu_limit must be a number of CPUs between 0.01 and 1024, "
                              f"got {cpu_limit}")
        self.cpu_limit = cpu_limit
        self._cgroups = ServerCgroups(memory_limit_bytes, cpu_limit)
        if os.geteuid() == 0:
            self.os_user: str | None = os_user or pg_binaries.DEFAULT_OS_USER
            self._pw: pwd.struct_passwd | None = pg_binaries.ensure_os_user(self.os_user)
        else:
            if os_user is not None and os_user != pwd.getpwuid(os.geteuid()).pw_name:
                raise ConfigError(
                    f"os_user={os_user!r} needs root to switch users; the tuner runs as "
                    f"{pwd.getpwuid(os.geteuid()).pw_name!r}"
                )
            self.os_user = None
            self._pw = None

    # ------------------------------------------------------------------ properties
    @property
    def port(self) -> int:
        return self._port

    @property
    def bin_dir(self) -> Path:
        return self._bin_dir

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.state_dir / "sock"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "postgres.log"

    @property
    def dsn(self) -> str:
        """libpq key/value connection string for the ``postgres`` database."""
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        """libpq key/value connection string for ``dbname`` as superuser ``postgres``."""
        quoted = dbname.replace("\\", "\\\\").replace("'", "\\'")
        return f"host=127.0.0.1 port={self._port} user=postgres dbname='{quoted}'"

    # ------------------------------------------------------------------ commands
    def command_prefix(self) -> list[str]:
        """argv prefix that runs a command as the cluster's OS user (empty when not root)."""
        if self.os_user is None:
            return []
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        return [runuser, "-u", self.os_user, "--"]

    def run(
        self, argv: list[str], *, timeout_s: float | None = None, cgroup: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run a server-side command as the cluster's OS user; returns the completed process."""
        full = self.command_prefix() + argv
        procs = self._cgroups.procs()
        if cgroup and procs:
            # a root shell joins the cgroups first, so pg_ctl and the postmaster it forks
            # are born inside them; then it drops to the unprivileged user
            joins = " && ".join(f'echo $$ > "{p}"' for p in procs)
            full = ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *full]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C",
            "LANG": "C",
            "HOME": self._pw.pw_dir if self._pw else os.environ.get("HOME", "/tmp"),
        }
        try:
            return subprocess.run(
                full,
                capture_output=True,
                text=True,
                timeout=timeout_s if timeout_s is not None else self.timeout_s + 30,
                check=False,
                env=env,
                cwd=str(self.state_dir),
            )
        except subprocess.TimeoutExpired as exc:
            raise DatabaseError(
                f"{' '.join(argv[:2])} did not finish within {exc.timeout:.0f} s "
                f"(cluster {self.data_dir})"
            ) from exc

    def _pg(self, tool: str) -> str:
        return str(self._bin_dir / tool)

    # ------------------------------------------------------------------ lifecycle
    def is_initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def init(self) -> None:
        """Create the state directory and run initdb unless a cluster already exists there."""
        self._prepare_state_dir()
        if self.is_initialized():
            self._write_conf()
            return
        if self.template_data_dir is not None:
            self._copy_template(self.template_data_dir)
            return
        argv = [
            self._pg("initdb"),
            "-D", str(self.data_dir),
            "-U", "postgres",
            "-E", "UTF8",
            "--no-locale",
            "--auth=trust",
        ]
        if not self.sync_initdb:
            argv.append("--no-sync")
        proc = self.run(argv, timeout_s=300)
        if proc.returncode != 0:
            raise DatabaseError(
                f"initdb into {self.data_dir} failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
            )
        self._write_hba()
        self._write_conf()
        logger.info("initialised PostgreSQL cluster in %s", self.data_dir)

    def _copy_template(self, template: Path) -> None:
        """Initialise by copying a stopped cluster's data directory (much faster than initdb)."""
        if not (template / "PG_VERSION").exists():
            raise ConfigError(f"template_data_dir {template} is not a PostgreSQL data directory")
        if (template / "postmaster.pid").exists():
            raise ConfigError(f"template_data_dir {template} belongs to a running server; "
                              "stop it before copying")
        proc = self.run(["cp", "-a", str(template), str(self.data_dir)], timeout_s=300)
        if proc.returncode != 0:
            raise DatabaseError(f"copying the template cluster {template} failed: "
                                f"{proc.stderr.strip()}")
        for stale in ("postmaster.opts", "postgresql.auto.conf.harmony-tmp"):
            (self.data_dir / stale).unlink(missing_ok=True)
        self._write_hba()
        self._write_conf()
        logger.info("initialised PostgreSQL cluster in %s from template %s", self.data_dir,
                    template)

    def _prepare_state_dir(self) -> None:
        prepare_state_dir(self.state_dir, self.socket_dir, self.log_path, self._pw)

    def _write_hba(self) -> None:
        write_hba(self.data_dir, self._pw)

    def _write_conf(self) -> None:
        """Write the cluster's fixed settings into an include file of postgresql.conf."""
        write_local_conf(self.data_dir, self.socket_dir, self._port, self._pw)

    def is_running(self) -> bool:
        """True when ``pg_ctl status`` finds a live postmaster for the data directory."""
        if not self.is_initialized():
            return False
        proc = self.run([self._pg("pg_ctl"), "-D", str(self.data_dir), "status"], timeout_s=30)
        return proc.returncode == 0

    def start(self, timeout_s: float | None = None) -> None:
        """Initialise if needed and start the server, waiting until it accepts connections."""
        if not self.is_initialized():
            self.init()
        else:
            self._prepare_state_dir()
            pg_binaries.check_data_version(self.data_dir, self._bin_dir, self.state_dir)
        if self.is_running():
            self._adopt_running_port()
            return
        # the port this object connects to goes into the config on every start: an
        # existing cluster may have been written with another port by an earlier object
        self._write_conf()
        self.enter_cgroups()
        attempts = 1 if self._port_given else 3
        for attempt in range(attempts):
            proc = self._pg_ctl_start(timeout_s)
            if proc.returncode == 0:
                logger.info("PostgreSQL started on 127.0.0.1:%s (%s)", self._port, self.data_dir)
                return
            tail = self.log_tail()
            if "could not bind" in tail and attempt + 1 < attempts:
                # another process took the port between picking and starting: pick again
                logger.warning("port %s is taken, retrying on another port", self._port)
                self._port = pg_binaries.find_free_port()
                self._write_conf()
                continue
            raise DatabaseError(
                f"PostgreSQL in {self.data_dir} did not start (pg_ctl exit {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-500:]}); server log tail:\n{tail}"
            )

    def running_port(self) -> int | None:
        """The port in the running postmaster's ``postmaster.pid`` (None when unreadable)."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            return int(lines[3])
        except (OSError, IndexError, ValueError):
            return None

    def _adopt_running_port(self) -> None:
        """Make the DSN follow a server that is already running (started by another object)."""
        running = self.running_port()
        if running is None or running == self._port:
            return
        if self._port_given:
            raise DatabaseError(
                f"PostgreSQL in {self.data_dir} is already running on port {running}, but this "
                f"LocalCluster was given port {self._port}; stop the server first"
            )
        logger.info("PostgreSQL in %s already runs on port %s; using that port", self.data_dir,
                    running)
        self._port = running

    def _pg_ctl_start(self, timeout_s: float | None) -> subprocess.CompletedProcess[str]:
        t = int(timeout_s if timeout_s is not None else self.timeout_s)
        return self.run(
            [
                self._pg("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path),
                "-w", "-t", str(max(1, t)), "start",
            ],
            timeout_s=t + 30,
            cgroup=True,
        )

    def stop(self, timeout_s: float | None = None, mode: str = "fast", *,
             keep_cgroup: bool = False) -> None:
        """Stop the server (``pg_ctl stop -m fast -w``); no-op when it is not running. With
        ``keep_cgroup`` (a restart) its cgroups stay for the next start, and with them the
        page cache it filled within its memory limit (:class:`ServerCgroups`)."""
        if not self.is_running():
            if not keep_cgroup:
                self._remove_cgroup()
            return
        t = int(timeout_s if timeout_s is not None else self.timeout_s)
        foreign = foreign_cgroups(self.data_dir, self._cgroups.paths())  # a dead run's
        proc = self.run(
            [self._pg("pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "-t",
             str(max(1, t)), "stop"],
            timeout_s=t + 30,
        )
        if proc.returncode != 0 and self.is_running():
            if mode != "immediate":
                logger.warning("pg_ctl stop -m %s failed; stopping with -m immediate", mode)
                self.stop(timeout_s, mode="immediate", keep_cgroup=keep_cgroup)
                return
            raise DatabaseError(
                f"PostgreSQL in {self.data_dir} did not stop: "
                f"{(proc.stderr or proc.stdout).strip()[-500:]}"
            )
        if not keep_cgroup:
            self._remove_cgroup()
        remove_cgroups(foreign)
        logger.info("PostgreSQL stopped (%s)", self.data_dir)

    def restart(self, timeout_s: float | None = None) -> None:
        """Stop then start in the same cgroups (never ``pg_ctl restart -o``, see the module
        docstring)."""
        self.stop(timeout_s, keep_cgroup=True)
        self.start(timeout_s)

    def destroy(self) -> None:
        """Stop the server and delete the whole state directory."""
        with contextlib.suppress(DatabaseError):
            self.stop()
        self._remove_cgroup()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def log_tail(self, max_lines: int = 20) -> str:
        """Last lines of the server log (empty when there is none yet)."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-max_lines:])

    def postmaster_opts(self) -> str:
        """The content of ``postmaster.opts`` (what the last start was given), or ''."""
        try:
            return (self.data_dir / "postmaster.opts").read_text()
        except OSError:
            return ""

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ memory cgroup
    def effective_ram_bytes(self) -> int | None:
        """The memory limit the server runs under when one was set, else None."""
        return self.memory_limit_bytes

    def cgroup_path(self) -> Path | None:
        """The memory cgroup directory the server is started in (None when unlimited)."""
        return self._cgroups.memory

    def cpu_cgroup_path(self) -> Path | None:
        """The CPU cgroup directory the server is started in (None without ``cpu_limit``)."""
        return self._cgroups.cpu

    def cgroup_paths(self) -> list[Path]:
        """Every cgroup directory the server runs in (memory, CPU), for a record that outlives
        the tuner: a clone's, a restore journal's."""
        return self._cgroups.paths()

    def planned_cgroups(self) -> list[Path]:
        """Every cgroup directory :meth:`enter_cgroups` may make (see
        :meth:`ServerCgroups.possible`), for a record saved before they exist."""
        return self._cgroups.possible(self._cgroup_suffix())

    def _cgroup_suffix(self) -> str:
        return f"{self._port}-{os.getpid()}"

    def enter_cgroups(self) -> None:
        """Make the cluster's cgroups now (a start does it too), so that a command run with
        ``run(..., cgroup=True)`` before the first start (a clone's copy) is charged to them."""
        self._cgroups.make(self._cgroup_suffix())

    def _remove_cgroup(self) -> None:
        self._cgroups.remove()
