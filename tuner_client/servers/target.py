"""The database a tuning run works on: an existing server (DSN + controller) or an embedded one.

With no DSN the tuner creates and owns a private :class:`LocalCluster` in its state
directory (optionally inside a memory cgroup) and loads a small TPC-H database into it;
the cluster and the loaded data are reused by later runs with the same state directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.config import TunerConfig
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers import pg_binaries
from tuner_client.servers.controllers import Controller
from tuner_client.servers.controllers import make_controller as build_controller
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.managed import ManagedServer, read_managed
from workloads.apps import setup_app
from workloads.tpch.load import load_tpch

logger = logging.getLogger(__name__)

#: the database of the embedded cluster that holds the TPC-H data
EMBEDDED_DBNAME = "tpch"


def default_state_dir(name: str) -> Path:
    """Where the embedded cluster lives when no ``--state-dir`` is given.

    Not under the home directory: when the tuner runs as root, PostgreSQL runs as an
    unprivileged user that must reach the directory.
    """
    base = os.environ.get("HARMONY_STATE_DIR")
    if base:
        return Path(base) / name
    return Path("/var/tmp") / f"harmony-{os.geteuid()}" / name


@dataclass
class Target:
    """A reachable server with its knob catalog and a controller that can restart it."""

    dsn: str
    catalog: KnobCatalog
    controller: Controller
    cluster: LocalCluster | None
    ram_bytes: int | None  # a limit known from the setup (memory cgroup), else None
    #: managed mode's reading of the role's rights and the operator's settings (None: the
    #: tuner may restart the server and ALTER SYSTEM)
    managed: ManagedServer | None = None

    @property
    def embedded(self) -> bool:
        return self.cluster is not None

    def close(self) -> None:
        """Stop the embedded cluster (an existing server is left running)."""
        if self.cluster is not None:
            with contextlib.suppress(DatabaseError):
                self.cluster.stop()


def open_target(config: TunerConfig, state_dir: Path | None = None) -> Target:
    """Connect to the configured server, or start (and fill) the embedded one."""
    if config.database.embedded:
        return _open_embedded(config, state_dir or default_state_dir(config.name))
    dsn = config.database.dsn
    assert dsn is not None  # embedded is False exactly when a DSN is given
    catalog = read_catalog(dsn)
    managed = read_server_rights(config, dsn, catalog)
    controller = make_controller(config, dsn=dsn, cluster=None)
    return Target(dsn=dsn, catalog=catalog, controller=controller, cluster=None, ram_bytes=None,
                  managed=managed)


def read_server_rights(config: TunerConfig, dsn: str, catalog: KnobCatalog
                       ) -> ManagedServer | None:
    """Managed mode's reading of the server (None with a controller); a controller whose role
    may not ``ALTER SYSTEM`` is a :class:`ConfigError`: its restarts would be refused."""
    superuser_knobs = [k.name for k in config.knob_specs()
                       if k.name in catalog and catalog[k.name].context == "superuser"]
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            server = read_managed(conn, superuser_knobs)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot read the role's rights on {dsn}: {exc}") from exc
    if config.database.managed:
        return server
    if not server.rights.alter_system:
        raise ConfigError(f"{config.source}: database.controller (kind "
                          f"{config.database.controller.kind!r}) restarts the server after "
                          f"ALTER SYSTEM, but {server.rights.text()}; connect as a superuser, "
                          f"or remove database.controller to tune in managed mode (session "
                          f"knobs per transaction, ALTER DATABASE output)")
    return None


def _open_embedded(config: TunerConfig, state_dir: Path) -> Target:
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(state_dir / "cluster", bin_dir=config.database.bin_dir,
                           memory_limit_bytes=config.database.memory_limit_bytes,
                           timeout_s=config.database.restart_timeout_s)
    mismatch = pg_binaries.version_mismatch(cluster.data_dir, cluster.bin_dir)
    if mismatch is not None:
        # the embedded cluster is the tuner's own, filled with generated data: made afresh
        # by the binaries in use rather than refused
        logger.warning("%s: removing it and making a new one (the embedded cluster holds "
                       "generated data only)", mismatch)
        cluster.destroy()
    if cluster.is_initialized():
        # a cluster from an earlier run: a leftover server is stopped so that this run
        # starts it afresh (on this object's port, inside this run's memory cgroup)
        cluster.stop()
    cluster.start()
    try:
        dsn = fill_embedded(config, cluster, state_dir)
        catalog = read_catalog(dsn)
        controller = make_controller(config, dsn=dsn, cluster=cluster)
    except BaseException:
        cluster.stop()
        raise
    return Target(dsn=dsn, catalog=catalog, controller=controller, cluster=cluster,
                  ram_bytes=cluster.effective_ram_bytes())


def fill_embedded(config: TunerConfig, cluster: LocalCluster, state_dir: Path) -> str:
    """The embedded database on the started ``cluster``, created and filled with the
    workload's data (TPC-H or an example application; reused when present); its DSN."""
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                              [EMBEDDED_DBNAME]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(EMBEDDED_DBNAME)))
    dsn = cluster.dsn_for(EMBEDDED_DBNAME)
    if config.workload.kind == "tpch":
        logger.info("loading TPC-H scale %s into the embedded cluster (reused if present)",
                    config.workload.scale)
        result = load_tpch(dsn, config.workload.scale, workdir=state_dir / "tpch-data")
        logger.info("TPC-H scale %s %s (%.1f MB)", result.scale,
                    "reused" if result.reused else f"loaded in {result.seconds:.1f} s",
                    result.database_bytes / 2**20)
    elif config.workload.app is not None:
        app = setup_app(dsn, config.workload.app, config.workload.app_scale)
        logger.info("example application %s at scale %d %s (%.1f MB)", app.name, app.scale,
                    "reused" if app.reused else f"loaded in {app.seconds:.1f} s",
                    app.database_bytes / 2**20)
    return dsn


def read_catalog(dsn: str) -> KnobCatalog:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            return KnobCatalog.from_connection(conn)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot connect to the database to tune ({dsn}): {exc}") from exc


def make_controller(config: TunerConfig, *, dsn: str, cluster: LocalCluster | None
                    ) -> Controller:
    """The configured controller (``local`` for the embedded cluster)."""
    options = dict(config.database.controller.options)
    kind = config.database.controller.kind
    try:
        if kind == "local":
            if cluster is None:
                raise ConfigError("controller kind 'local' needs the embedded cluster")
            return Controller.registry.build("local", cluster, **options)
        return build_controller(kind, dsn=dsn, **options)
    except ConfigError as exc:
        raise ConfigError(f"{config.source}: database.controller (kind {kind!r}): "
                          f"{exc}") from None
