"""The measurer the probe tests drive on a private cluster: its own statement loop, no
warm-up, one sample, the cluster's shared_buffers as what is in force."""

from __future__ import annotations

import psycopg

from tuner_client.config import MeasureConfig
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import Measurer, ServerAccess
from tuner_client.servers.controllers.local import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from workloads.loop import StatementLoop


def probe_measurer(cluster: LocalCluster, loop: StatementLoop) -> tuple[Measurer, str]:
    """A measurer restarting ``cluster`` itself and measuring ``loop``; and the cluster's
    shared_buffers (to restore after the probes)."""
    with psycopg.connect(cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
        original = str(conn.execute("SHOW shared_buffers").fetchone()[0])  # type: ignore[index]
    measurer = Measurer(ServerAccess(cluster.dsn, catalog,
                                     LocalController(cluster, precheck_memory=False)),
                        loop, MeasureConfig(warmup_s=0, samples=1))
    measurer.in_force = {"shared_buffers": original}
    return measurer, original
