"""The configurations a per-transaction comparison draws from: each checked against
``pg_settings`` (only knobs a transaction may set itself) and turned into ``SET LOCAL``.

``SET LOCAL`` lasts until the transaction ends, so a transaction that begins with it runs
under that configuration and the next one starts from the session's own settings again.
Knobs whose ``pg_settings.context`` is ``user`` or ``superuser`` can be set this way; the
others need a reload (``sighup``) or a restart (``postmaster``) and are refused with an error
naming the knob and its context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError

#: pg_settings contexts a transaction may change with SET LOCAL
SESSION_CONTEXTS = frozenset({"user", "superuser"})

#: one configuration under comparison: knob name -> value as PostgreSQL spells it
Configuration = Mapping[str, str]


def knob_contexts(conn: psycopg.Connection[TupleRow], names: Sequence[str]) -> dict[str, str]:
    """``pg_settings.context`` of each named knob (lower-cased name); unknown knobs absent."""
    rows = conn.execute("SELECT lower(name), context FROM pg_settings WHERE lower(name) = ANY(%s)",
                        [[n.lower() for n in names]]).fetchall()
    return {str(name): str(context) for name, context in rows}


def check_session_settable(conn: psycopg.Connection[TupleRow],
                           configurations: Sequence[Configuration]) -> None:
    """Raise :class:`ConfigError` unless every knob of every configuration exists and may be
    set per transaction (context ``user`` or ``superuser``)."""
    if len(configurations) < 1:
        raise ConfigError("a per-transaction comparison needs at least one configuration")
    names = sorted({name for config in configurations for name in config})
    contexts = knob_contexts(conn, names)
    for name in names:
        context = contexts.get(name.lower())
        if context is None:
            raise ConfigError(f"{name} is not a PostgreSQL setting (not in pg_settings); check "
                              f"the knob's spelling")
        if context not in SESSION_CONTEXTS:
            raise ConfigError(
                f"{name} cannot be set per transaction: its pg_settings context is {context!r}, "
                f"but SET LOCAL needs 'user' or 'superuser'; compare it with whole-server "
                f"windows (reload or restart) instead")


def set_local(config: Configuration) -> list[sql.Composed]:
    """``SET LOCAL knob TO value`` for each knob of ``config`` (composed, never formatted)."""
    return [_set_local_line(name, value) for name, value in sorted(config.items())]


def padded_set_local(configurations: Sequence[Configuration]) -> list[list[sql.Composed]]:
    """Per configuration, the same list of ``SET LOCAL`` lines: every knob any of them sets,
    in one order, ``TO DEFAULT`` (the session's own value) where this one does not set it.

    Every arm then pays the same statements before its work: a pgbench arm with fewer lines
    read 1.09× (1.05–1.14) faster than an identically configured one by round trips alone.
    """
    names = sorted({name for config in configurations for name in config})
    return [[_set_local_line(name, config.get(name)) for name in names]
            for config in configurations]


def _set_local_line(name: str, value: str | None) -> sql.Composed:
    """``SET LOCAL name TO value`` (``TO DEFAULT`` for None), composed."""
    return sql.SQL("SET LOCAL {} TO {}").format(
        sql.Identifier(*name.split(".")),
        sql.SQL("DEFAULT") if value is None else sql.Literal(str(value)))


def describe(config: Configuration) -> str:
    """``work_mem=64MB, jit=off`` (``(as configured)`` for the empty configuration)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(as configured)"
