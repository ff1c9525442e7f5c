"""The change hook: every ``ALTER SYSTEM`` of this process is recorded in its server's restore
journal (:mod:`.journal`) before the server sees it.

:func:`tuner_client.knobs.apply.alter_system` calls its change hooks first; :func:`activate`
installs :func:`journal_change` there. While a journal is active in this process, a change
to a server without one is refused rather than made unrecorded.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import KnobApplyError
from tuner_client.crashsafe.journal import Journal
from tuner_client.crashsafe.server_state import scalar
from tuner_client.knobs import apply

_LOCK = threading.Lock()
_ACTIVE: list[tuple[Journal, str, int]] = []  # journal, host and port its run connects to


def activate(journal: Journal) -> None:
    """Record this process's changes to ``journal``'s server in it from now on."""
    with _LOCK:
        _ACTIVE.append((journal, journal.server.host, journal.server.port))
        if journal_change not in apply.CHANGE_HOOKS:
            apply.CHANGE_HOOKS.append(journal_change)


def deactivate(journal: Journal) -> None:
    with _LOCK:
        _ACTIVE[:] = [a for a in _ACTIVE if a[0] is not journal]


def _journal_of(conn: psycopg.Connection[TupleRow]) -> Journal | None:
    with _LOCK:
        active_now = list(_ACTIVE)
    if not active_now:
        return None
    host, port = str(conn.info.host), int(conn.info.port)
    for journal, j_host, j_port in active_now:
        if (j_host, j_port) == (host, port):
            return journal
    # another address of a journaled server (the embedded cluster moves port on restart)
    with contextlib.suppress(psycopg.Error):
        sysid = str(scalar(conn, "SELECT system_identifier FROM pg_control_system()"))
        data_directory = scalar(conn, "SELECT current_setting('data_directory')")
        for journal, _, _ in active_now:
            if (journal.server.system_identifier, journal.server.data_directory) \
                    == (sysid, data_directory):
                return journal
    raise KnobApplyError(
        f"refusing to change {host}:{port}: this run keeps a restore journal for "
        f"{', '.join(j.server.describe() for j, _, _ in active_now)} but none for this server "
        "(a change without one could not be undone if the tuner died)")


def journal_change(conn: psycopg.Connection[TupleRow], values: Mapping[str, str | None]) -> None:
    """Called before every ``ALTER SYSTEM``: the change is durable in the server's journal
    before the server sees it (a no-op in a process that keeps no journal)."""
    journal = _journal_of(conn)
    if journal is not None:
        journal.record_change({name.lower(): value for name, value in values.items()})
