"""Managed mode's view of the server: what the connected role may do, and the settings the
operator made before the run.

A managed server (RDS, Aurora, Cloud SQL, Azure Flexible Server) gives no superuser:
``ALTER SYSTEM`` is refused and a restart goes through the provider. :class:`RoleRights` reads
what the role may do (superuser, ``ALTER SYSTEM`` on the tuned knobs, membership of
``pg_read_all_settings`` and ``pg_monitor``, ``SET`` on superuser-context knobs, PostgreSQL ≥ 15
``GRANT SET ON PARAMETER``), from which the mode and the knobs a session may measure follow
(:mod:`tuner_client.engine.managed`). :func:`read_operator_settings` reads the operator's own
settings in force for this database and role (``ALTER DATABASE``/``ALTER ROLE … SET``, ``-c``
options and ``PGOPTIONS``, the configuration file): the run keeps them, and replaces only the
knobs it tunes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError
from harmony_base.jsontypes import JSONObject

#: pg_db_role_setting rows, by (setdatabase = 0, setrole = 0), as the report names them
_LEVELS = {(True, False): "ALTER ROLE", (False, True): "ALTER DATABASE",
           (False, False): "ALTER ROLE IN DATABASE"}
#: pg_settings sources a driver or the server itself sets on every connection: not the
#: operator's choice (client_encoding from the driver, the rest computed at start)
_NOT_OPERATOR = frozenset({"client_encoding", "application_name", "DateStyle", "TimeZone",
                           "transaction_isolation", "transaction_read_only",
                           "transaction_deferrable", "default_transaction_isolation"})


@dataclass(frozen=True)
class RoleRights:
    """What the connected role may do on the server (read once, before the run)."""

    role: str
    database: str
    superuser: bool
    #: the role may ALTER SYSTEM (superuser, or granted ALTER SYSTEM on the probed knob)
    alter_system: bool
    read_all_settings: bool
    monitor: bool
    #: the superuser-context knobs (of those asked for) the role may SET
    settable: frozenset[str] = frozenset()
    #: the role owns the database (ALTER DATABASE … SET needs it)
    owns_database: bool = False

    def may_set(self, name: str, context: str) -> bool:
        """Whether a session of this role may ``SET LOCAL`` knob ``name`` of ``context``."""
        if context == "user":
            return True
        if context == "superuser":
            return self.superuser or name in self.settable
        return False

    def text(self) -> str:
        """One line for the plan and the decisions."""
        def yes(flag: bool) -> str:
            return "yes" if flag else "no"
        return (f"role {self.role} on database {self.database}: superuser {yes(self.superuser)}, "
                f"ALTER SYSTEM {'allowed' if self.alter_system else 'refused'}, "
                f"pg_read_all_settings {yes(self.read_all_settings)}, "
                f"pg_monitor {yes(self.monitor)}, owns the database {yes(self.owns_database)}")

    def to_dict(self) -> JSONObject:
        return {"role": self.role, "database": self.database, "superuser": self.superuser,
                "alter_system": self.alter_system,
                "pg_read_all_settings": self.read_all_settings, "pg_monitor": self.monitor,
                "owns_database": self.owns_database, "settable": sorted(self.settable)}


def read_rights(conn: psycopg.Connection[TupleRow], knobs: Iterable[str] = ()) -> RoleRights:
    """The rights of ``conn``'s role; ``knobs``: the superuser-context knobs to probe for
    ``SET`` (PostgreSQL ≥ 15 grants it per parameter)."""
    row = conn.execute(
        "SELECT current_user, current_database(), r.rolsuper, "
        "pg_has_role(current_user, 'pg_read_all_settings', 'USAGE'), "
        "pg_has_role(current_user, 'pg_monitor', 'USAGE'), "
        "d.datdba = r.oid "
        "FROM pg_roles r, pg_database d "
        "WHERE r.rolname = current_user AND d.datname = current_database()").fetchone()
    if row is None:  # a role dropped while connected
        raise DatabaseError("cannot read the connected role's rights: pg_roles has no row "
                            "for current_user")
    role, database, superuser, read_all, monitor, owns = row
    version = conn.info.server_version
    alter_system = bool(superuser)
    settable: set[str] = set()
    if version >= 150000 and not superuser:
        # GRANT ALTER SYSTEM / SET ON PARAMETER (PostgreSQL 15); work_mem stands for the knobs
        # a grant of ALTER SYSTEM would cover
        probe = conn.execute("SELECT has_parameter_privilege('work_mem', 'ALTER SYSTEM')"
                             ).fetchone()
        alter_system = bool(probe and probe[0])
        for name in knobs:
            got = conn.execute("SELECT has_parameter_privilege(%s, 'SET')", [name]).fetchone()
            if got and got[0]:
                settable.add(name)
    return RoleRights(role=str(role), database=str(database), superuser=bool(superuser),
                      alter_system=alter_system, read_all_settings=bool(read_all),
                      monitor=bool(monitor), settable=frozenset(settable),
                      owns_database=bool(owns))


@dataclass(frozen=True)
class OperatorSetting:
    """A setting the operator made before the run: its name, value and where it comes from
    (``ALTER DATABASE``, ``ALTER ROLE``, ``ALTER ROLE IN DATABASE``, or a ``pg_settings``
    source: ``client`` for ``-c`` options and ``PGOPTIONS``, ``configuration file``, ...)."""

    name: str
    value: str
    source: str

    def text(self) -> str:
        return f"{self.name}={self.value} ({self.source})"


def read_operator_settings(conn: psycopg.Connection[TupleRow]) -> list[OperatorSetting]:
    """The operator's settings for this database and role: ``pg_db_role_setting`` (every
    level that applies to the session) first, then the ``pg_settings`` rows whose source is
    not the default nor one of those levels (a ``-c`` option or ``PGOPTIONS`` shows as
    ``client``, the server's files as ``configuration file``)."""
    found: list[OperatorSetting] = []
    rows = conn.execute(
        "SELECT s.setdatabase = 0, s.setrole = 0, unnest(s.setconfig) "
        "FROM pg_db_role_setting s "
        "WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database "
        "                            WHERE datname = current_database())) "
        "AND s.setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = current_user)) "
        "AND NOT (s.setdatabase = 0 AND s.setrole = 0) "
        "ORDER BY 1, 2, 3").fetchall()
    for any_db, any_role, entry in rows:
        name, _, value = str(entry).partition("=")
        found.append(OperatorSetting(name, value, _LEVELS[(bool(any_db), bool(any_role))]))
    for name, setting, unit, source in conn.execute(
            "SELECT name, setting, unit, source FROM pg_settings "
            "WHERE source NOT IN ('default', 'override', 'session', "
            "                     'database', 'user', 'database user') ORDER BY name"):
        if name in _NOT_OPERATOR:
            continue
        value = f"{setting}{unit}" if unit and not unit[0].isdigit() else str(setting)
        if unit and unit[0].isdigit():
            value = f"{setting}×{unit}"
        found.append(OperatorSetting(str(name), value, str(source)))
    return found


@dataclass(frozen=True)
class ManagedServer:
    """What managed mode read from the server before the run: the role's rights and the
    operator's settings."""

    rights: RoleRights
    operator: tuple[OperatorSetting, ...] = ()

    def to_dict(self) -> JSONObject:
        return {"rights": self.rights.to_dict(),
                "operator_settings": [{"name": s.name, "value": s.value, "source": s.source}
                                      for s in self.operator]}


def read_managed(conn: psycopg.Connection[TupleRow], knobs: Iterable[str] = ()
                 ) -> ManagedServer:
    """The role's rights (``knobs``: superuser-context knobs to probe) and the operator's
    settings, read on ``conn``."""
    return ManagedServer(read_rights(conn, knobs), tuple(read_operator_settings(conn)))
