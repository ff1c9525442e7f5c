"""Apply online knobs with ``ALTER SYSTEM`` + ``pg_reload_conf()`` and prove they took effect.

A value counts as applied only when a *fresh* session (same database and role as the given
connection, so ``ALTER DATABASE/ROLE … SET`` apply to it) sees it in ``pg_settings`` with
``source = 'configuration file'`` from ``postgresql.auto.conf``, without ``pending_restart``,
and ``pg_file_settings`` reports no error. Anything else, e.g. a ``-c`` command-line option
(also the ones pg_ctl saved in ``postmaster.opts``) or a role/database setting, is an
override and raises :class:`KnobApplyError` naming the knob and where its value comes from.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError, DatabaseError, KnobApplyError
from harmony_base.jsontypes import JSON
from tuner_client.knobs.catalog import Knob, KnobCatalog, KnobValue

logger = logging.getLogger(__name__)

#: where a pg_settings ``source`` other than the config files comes from, for messages
SOURCE_HINTS = {
    "command line": "a -c option on the postgres command line (or saved by pg_ctl -o in "
    "postmaster.opts)",
    "environment variable": "an environment variable of the server process",
    "database": "ALTER DATABASE … SET",
    "user": "ALTER ROLE … SET",
    "database user": "ALTER ROLE … IN DATABASE … SET",
    "client": "the client's connection options (PGOPTIONS or options= in the DSN)",
    "override": "a server-computed override",
    "session": "a SET in the session",
}


#: called with the connection and ``{knob: value, or None for a reset}`` before every
#: ``ALTER SYSTEM`` the tuner issues: the restore journal (:mod:`tuner_client.crashsafe`)
#: makes each change durable before the server sees it, and may refuse it by raising
ChangeHook = Callable[["psycopg.Connection[TupleRow]", Mapping[str, "str | None"]], None]
CHANGE_HOOKS: list[ChangeHook] = []


def _before_change(conn: psycopg.Connection[TupleRow], values: Mapping[str, str | None]) -> None:
    for hook in list(CHANGE_HOOKS):
        hook(conn, values)


@dataclass(frozen=True)
class SettingState:
    """What one fresh session sees for one knob."""

    name: str
    setting: str  # pg_settings.setting, native units
    shown: str  # current_setting(): with units, e.g. '64MB'
    source: str
    sourcefile: str | None
    pending_restart: bool


@dataclass
class ApplyReport:
    """Result of :func:`apply_online_knobs`: the values written and what a new session sees."""

    requested: dict[str, str]  # knob -> formatted value written with ALTER SYSTEM
    in_force: dict[str, str]  # knob -> current_setting() in a fresh session
    changed: list[str] = field(default_factory=list)  # knobs whose value actually changed
    elapsed_s: float = 0.0


def _fresh_connect(conn: psycopg.Connection[TupleRow]) -> psycopg.Connection[TupleRow]:
    """A new connection with the same parameters (database, role, options) as ``conn``."""
    params: dict[str, Any] = dict(conn.info.get_parameters())
    if conn.info.password:
        params["password"] = conn.info.password
    params.setdefault("connect_timeout", "10")
    try:
        return psycopg.connect(autocommit=True, **params)
    except psycopg.Error as exc:
        raise DatabaseError(f"could not open a verification session to {conn.info.host}:"
                            f"{conn.info.port}: {exc}") from exc


def read_settings(conn: psycopg.Connection[TupleRow],
                  names: Iterable[str]) -> dict[str, SettingState]:
    """pg_settings rows of ``names`` as this session sees them (lower-case keys)."""
    rows = conn.execute(
        "SELECT name, setting, current_setting(name), source, sourcefile, pending_restart "
        "FROM pg_settings WHERE lower(name) = ANY(%s)",
        [[n.lower() for n in names]],
    ).fetchall()
    return {
        r[0].lower(): SettingState(r[0], r[1], r[2], r[3], r[4], bool(r[5])) for r in rows
    }


def file_setting_errors(conn: psycopg.Connection[TupleRow]) -> list[str]:
    """Errors ``pg_file_settings`` reports for the configuration files (empty when clean)."""
    rows = conn.execute(
        "SELECT sourcefile, sourceline, name, setting, error FROM pg_file_settings "
        "WHERE error IS NOT NULL"
    ).fetchall()
    return [f"{r[0]}:{r[1]} {r[2]} = {r[3]!r}: {r[4]}" for r in rows]


def _matches(knob: Knob, expected: KnobValue, setting: str) -> bool:
    actual = knob.from_setting(setting)
    if isinstance(expected, float) or isinstance(actual, float):
        # pg_settings prints reals with 6 significant digits (%g)
        return math.isclose(float(actual), float(expected), rel_tol=1e-5, abs_tol=1e-12)
    return actual == expected


def check_settings(
    knobs: Mapping[str, tuple[Knob, KnobValue]],
    states: Mapping[str, SettingState],
    *,
    expect_auto_conf: bool = True,
) -> dict[str, str]:
    """Problems per knob (empty when every knob has its expected value from ALTER SYSTEM)."""
    problems: dict[str, str] = {}
    for key, (knob, expected) in knobs.items():
        state = states.get(key)
        if state is None:
            problems[knob.name] = "not visible in pg_settings"
            continue
        wrong_value = not _matches(knob, expected, state.setting)
        if state.source != "configuration file":
            hint = SOURCE_HINTS.get(state.source, state.source)
            problems[knob.name] = (
                f"{knob.name} is overridden: a new session sees {state.shown} from source "
                f"{state.source!r} ({hint}), not the ALTER SYSTEM value {knob.format(expected)}"
            )
        elif (expect_auto_conf and state.sourcefile is not None
              and not state.sourcefile.endswith("postgresql.auto.conf")):
            problems[knob.name] = (
                f"{knob.name} comes from {state.sourcefile}, not postgresql.auto.conf "
                f"(value {state.shown}, wanted {knob.format(expected)})"
            )
        elif wrong_value:
            problems[knob.name] = (
                f"{knob.name} is {state.shown} in a new session, wanted {knob.format(expected)}"
            )
        elif state.pending_restart:
            problems[knob.name] = f"{knob.name} is pending a restart"
    return problems


def _resolve(
    catalog: KnobCatalog, values: Mapping[str, JSON], *, kind: str | None
) -> dict[str, tuple[Knob, KnobValue]]:
    resolved: dict[str, tuple[Knob, KnobValue]] = {}
    for name, raw in values.items():
        knob = catalog.tunable(name)
        if kind is not None and knob.kind != kind:
            raise ConfigError(
                f"{knob.name} needs a server restart (context {knob.context!r}); apply it "
                "through a controller's restart_with(), not apply_online_knobs()"
            )
        resolved[knob.name.lower()] = (knob, knob.coerce(raw))
    return resolved


def _ensure_autocommit(conn: psycopg.Connection[TupleRow]) -> bool:
    """Switch ``conn`` to autocommit (ALTER SYSTEM refuses transactions); return the old mode."""
    old = conn.autocommit
    if not old:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise KnobApplyError(
                "ALTER SYSTEM cannot run inside a transaction: commit or roll back the "
                "connection's open transaction before applying knobs"
            )
        conn.autocommit = True
    return old


def alter_system(conn: psycopg.Connection[TupleRow], formatted: Mapping[str, str]) -> None:
    """``ALTER SYSTEM SET name = 'value'`` for each item, composed with psycopg.sql; the
    values are in the server's restore journal first (:data:`CHANGE_HOOKS`)."""
    _before_change(conn, formatted)
    old = _ensure_autocommit(conn)
    try:
        for name, text in formatted.items():
            stmt = sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                               sql.Literal(text))
            try:
                conn.execute(stmt)
            except psycopg.Error as exc:
                raise KnobApplyError(f"ALTER SYSTEM SET {name} = {text!r} failed: "
                                     f"{exc}") from exc
    finally:
        conn.autocommit = old


def wait_for_settings(
    conn: psycopg.Connection[TupleRow],
    knobs: Mapping[str, tuple[Knob, KnobValue]],
    timeout_s: float,
    *,
    reloaded_since: datetime | None = None,
) -> tuple[dict[str, SettingState], dict[str, str]]:
    """Poll fresh sessions until the knobs show their values (reload is asynchronous).

    Returns the last states seen and the remaining problems (empty on success). With
    ``reloaded_since`` (a server timestamp taken before ``pg_reload_conf()``), polling stops
    as soon as a fresh session has loaded the configuration after it: what it sees then is
    final, so an override is reported at once instead of after the timeout.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        with _fresh_connect(conn) as fresh:
            states = read_settings(fresh, knobs)
            reloaded = False
            if reloaded_since is not None:
                row = fresh.execute("SELECT pg_conf_load_time() >= %s", [reloaded_since]).fetchone()
                reloaded = bool(row and row[0])
        problems = check_settings(knobs, states)
        if not problems or reloaded or time.monotonic() >= deadline:
            return states, problems
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def reload_and_wait(conn: psycopg.Connection[TupleRow], timeout_s: float = 5.0) -> bool:
    """``pg_reload_conf()``, then wait until ``conn``'s own session has loaded the files after
    it: the reload is asynchronous, so a read right after it can still see the old values
    (seen under load when a restored ``postgresql.auto.conf`` was checked at once). False when
    ``timeout_s`` passed first."""
    old = _ensure_autocommit(conn)
    try:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout_s
        delay = 0.005
        while row is not None:
            done = conn.execute("SELECT pg_conf_load_time() >= %s", [row[0]]).fetchone()
            if done and done[0]:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        return False
    finally:
        conn.autocommit = old


def apply_online_knobs(
    conn: psycopg.Connection[TupleRow],
    catalog: KnobCatalog,
    values: Mapping[str, JSON],
    *,
    timeout_s: float = 5.0,
) -> ApplyReport:
    """Set online knobs server-wide and verify them in a fresh session.

    ``values`` maps knob names to strings as a user writes them (``'64MB'``, ``'on'``) or to
    canonical values (bytes, ms, numbers, bools; see :mod:`tuner_client.knobs.catalog`). Raises
    ConfigError for unknown, non-tunable, offline or out-of-range knobs (nothing changes) and
    KnobApplyError when a value does not take effect, naming the knob and the source
    that overrides it.
    """
    started = time.monotonic()
    knobs = _resolve(catalog, values, kind="online")
    formatted = {k.name: k.format(v) for k, v in knobs.values()}
    old = _ensure_autocommit(conn)
    try:
        before = read_settings(conn, knobs)
        alter_system(conn, formatted)
        stamp = conn.execute("SELECT clock_timestamp()").fetchone()
        reloaded = conn.execute("SELECT pg_reload_conf()").fetchone()
        if not reloaded or not reloaded[0]:
            raise KnobApplyError("pg_reload_conf() returned false: the server got no SIGHUP")
        errors = file_setting_errors(conn)
    finally:
        conn.autocommit = old
    states, problems = wait_for_settings(conn, knobs, timeout_s,
                                         reloaded_since=stamp[0] if stamp else None)
    if problems or errors:
        detail = "; ".join(list(problems.values()) + [f"config file error: {e}" for e in errors])
        raise KnobApplyError(f"online knobs not applied as requested: {detail}")
    changed = [
        knob.name for key, (knob, _) in knobs.items()
        if key in before and before[key].setting != states[key].setting
    ]
    report = ApplyReport(
        requested=formatted,
        in_force={knob.name: states[key].shown for key, (knob, _) in knobs.items()},
        changed=changed,
        elapsed_s=time.monotonic() - started,
    )
    logger.info("applied %s in %.3f s", report.in_force, report.elapsed_s)
    return report


def reset_knobs(
    conn: psycopg.Connection[TupleRow],
    names: Iterable[str],
    catalog: KnobCatalog | None = None,
    *,
    reload: bool = True,
) -> None:
    """``ALTER SYSTEM RESET`` each knob (back to postgresql.conf / built-in) and reload."""
    catalog = catalog or KnobCatalog.from_connection(conn)
    knobs = [catalog.tunable(n) for n in names]
    _before_change(conn, {knob.name: None for knob in knobs})
    old = _ensure_autocommit(conn)
    try:
        for knob in knobs:
            conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(knob.name)))
        if reload:
            conn.execute("SELECT pg_reload_conf()")
    finally:
        conn.autocommit = old
    logger.info("reset %s with ALTER SYSTEM RESET", [k.name for k in knobs])
