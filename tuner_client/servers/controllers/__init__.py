"""Controllers: restart PostgreSQL with new offline knobs, and roll back when it does not come up.

The protocol every controller follows (remember the last good ``postgresql.auto.conf``,
``ALTER SYSTEM``, stop, pre-check, start, verify, roll back on failure, hold signals) lives
in :mod:`.base` with :class:`Controller`, :class:`RestartReport` and :func:`make_controller`;
each kind is a module of its own behind it and registers itself by name: :mod:`.pg_ctl`
(an existing data directory), :mod:`.local` (the tuner's embedded cluster), :mod:`.docker`
(a container, via the Docker SDK), :mod:`.command` (user-given commands) and :mod:`.managed`
(a managed server: no restart, no ``ALTER SYSTEM``). Importing this
package registers every kind; the public names are re-exported here, so
``from tuner_client.servers.controllers import X`` is the import to use.
"""

from tuner_client.servers.controllers.base import (
    AUTO_CONF,
    RECOVERY_WAIT_S,
    Controller,
    RestartReport,
    make_controller,
)
from tuner_client.servers.controllers.command import CommandController
from tuner_client.servers.controllers.docker import DockerController
from tuner_client.servers.controllers.local import LocalController
from tuner_client.servers.controllers.managed import ManagedController
from tuner_client.servers.controllers.pg_ctl import PgCtlController

__all__ = [
    "AUTO_CONF",
    "RECOVERY_WAIT_S",
    "CommandController",
    "Controller",
    "DockerController",
    "LocalController",
    "ManagedController",
    "PgCtlController",
    "RestartReport",
    "make_controller",
]
