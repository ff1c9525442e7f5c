"""The local controller: the tuner's own embedded cluster, the default without a DSN."""

from __future__ import annotations

from tuner_client.servers.controllers.pg_ctl import PgCtlController
from tuner_client.servers.local_cluster import LocalCluster


class LocalController(PgCtlController, kind="local"):
    """The tuner's own :class:`LocalCluster` (the embedded default); backups in its state dir."""

    def __init__(self, cluster: LocalCluster, *, precheck_memory: bool = True) -> None:
        self.cluster = cluster
        if not cluster.is_initialized():
            cluster.init()
        super().__init__(cluster.data_dir, cluster.dsn, bin_dir=cluster.bin_dir,
                         os_user=cluster.os_user, log_path=cluster.log_path,
                         backup_dir=cluster.state_dir, ram_bytes=cluster.effective_ram_bytes(),
                         precheck_memory=precheck_memory)

    def server_running(self) -> bool:
        return self.cluster.is_running()

    def stop_server(self, timeout_s: float) -> None:
        # stopped to be started again (a restart, a restore): the same memory cgroup, so the
        # page cache the server filled stays within its limit (LocalCluster.stop)
        self.cluster.stop(timeout_s, keep_cgroup=True)

    def start_server(self, timeout_s: float) -> None:
        self.cluster.start(timeout_s)
        self.dsn = self.cluster.dsn  # the cluster may have moved to another free port
