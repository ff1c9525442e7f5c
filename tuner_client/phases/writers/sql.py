"""The recommendation as SQL and as ``postgresql.conf`` lines: ``ALTER SYSTEM`` (a server the
tuner may change), ``ALTER DATABASE … SET`` and ``ALTER ROLE … SET`` (a managed server: the
database owner or the role itself may run them, no superuser), and the conf fragment (both).

A database- or role-level value takes effect in new sessions; PostgreSQL applies the most
specific level a session matches (role in database, then role, then database, then the
server's), so a role-level value of the operator's hides an ``ALTER DATABASE`` one: the file
says so where the run found one. Statements are composed with :mod:`psycopg.sql`.
"""

from __future__ import annotations

from psycopg import sql

from tuner_client.phases.writers.base import (
    MANAGED,
    SERVER,
    Recommendation,
    RecommendationWriter,
)


def _literal(value: str) -> str:
    return sql.Literal(value).as_string(None)


def _name(knob: str) -> sql.SQL:
    """A knob's name as written in SET (checked against pg_settings before it gets here:
    lower-case, letters, digits, ``_`` and the ``.`` of an extension's knobs)."""
    if not knob.replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"not a knob name: {knob!r}")
    return sql.SQL(knob)


def _evidence(rec: Recommendation) -> list[str]:
    return [f"-- {rec.evidence}"] if rec.evidence else []


class AlterSystemWriter(RecommendationWriter, kind="alter_system"):
    """``ALTER SYSTEM`` statements and the reload (a restart named for ``postmaster`` knobs)."""

    file_name = "alter_system.sql"
    modes = frozenset({SERVER})

    def render(self, rec: Recommendation) -> str:
        lines = ["-- written by harmony tune: apply with psql as a superuser", *_evidence(rec)]
        for knob in rec.knobs:
            note = "  -- needs a restart" if knob.restart else ""
            lines.append(sql.SQL("ALTER SYSTEM SET {} = {};").format(
                _name(knob.name), sql.Literal(knob.value)).as_string(None) + note)
        lines.append("SELECT pg_reload_conf();")
        restart = sorted(k.name for k in rec.knobs if k.restart)
        if restart:
            lines.append(f"-- then restart PostgreSQL for {', '.join(restart)}")
        return "\n".join(lines) + "\n"


class ConfFragmentWriter(RecommendationWriter, kind="conf"):
    """``postgresql.conf`` lines."""

    file_name = "postgresql.conf.fragment"
    modes = frozenset({SERVER, MANAGED})

    def render(self, rec: Recommendation) -> str:
        body = "".join(f"{k.name} = {_literal(k.value)}\n" for k in rec.knobs)
        return "# written by harmony tune\n" + body


class _LevelWriter(RecommendationWriter):
    """``ALTER DATABASE``/``ALTER ROLE … SET`` for the session-level knobs; a knob a session
    cannot set (``sighup``, ``postmaster``) is named for the provider's parameter group."""

    level: str = ""
    file_name = ""
    modes = frozenset({MANAGED})

    def target(self, rec: Recommendation) -> str | None:
        raise NotImplementedError

    def render(self, rec: Recommendation) -> str:
        name = self.target(rec)
        who = "the database owner" if self.level == "DATABASE" else "the role itself or its admin"
        lines = [f"-- written by harmony tune: run with psql as {who}; new sessions take the "
                 f"values", *_evidence(rec)]
        if name is None:
            return "\n".join([*lines, f"-- no {self.level.lower()} known to the run"]) + "\n"
        for knob in rec.knobs:
            if knob.context not in ("user", "superuser"):
                lines.append(f"-- {knob.name} = {knob.value}: a {knob.context!r} knob, set "
                             f"it in the provider's parameter group")
                continue
            found = rec.operator.get(knob.name)
            if found is not None and self.level == "DATABASE" and "ROLE" in found:
                lines.append(f"-- {knob.name}: the operator's {found} wins over this "
                             f"database-level value: reset it, or use alter_role.sql")
            elif found is not None:
                lines.append(f"-- {knob.name}: replaces the operator's {found}")
            lines.append(sql.SQL("ALTER {} {} SET {} = {};").format(
                sql.SQL(self.level), sql.Identifier(name), _name(knob.name),
                sql.Literal(knob.value)).as_string(None))
        return "\n".join(lines) + "\n"


class AlterDatabaseWriter(_LevelWriter, kind="alter_database"):
    """``ALTER DATABASE <the run's database> SET``."""

    level = "DATABASE"
    file_name = "alter_database.sql"

    def target(self, rec: Recommendation) -> str | None:
        return rec.database


class AlterRoleWriter(_LevelWriter, kind="alter_role"):
    """``ALTER ROLE <the run's role> SET`` (wins over the database level)."""

    level = "ROLE"
    file_name = "alter_role.sql"

    def target(self, rec: Recommendation) -> str | None:
        return rec.role
