"""Loading TPC-H data into PostgreSQL: generate, COPY (streamed), keys, indexes, ANALYZE.

Idempotent: a finished load records its scale factor in a marker table. Loading the same
scale again reuses the database; a different scale raises WorkloadError unless
``replace=True``, which drops the TPC-H tables and loads afresh (a load that was interrupted
left no marker and is always redone).
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError, WorkloadError
from workloads.connect import connect, describe_dsn, relation_exists
from workloads.tpch.generate import GENERATOR, generate_files, scale_arg
from workloads.tpch.schema import (
    COLUMNS,
    FOREIGN_KEY_INDEXES,
    MARKER_TABLE,
    PRIMARY_KEYS,
    ROW_COUNTS,
    TABLES,
)

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
_PROGRESS_EVERY_BYTES = 16 << 20
_LOAD_LOCK_KEY = 0x7470636801  # advisory lock: one TPC-H load per database at a time


@dataclass(frozen=True)
class LoadProgress:
    """One progress report; ``phase`` is "generate", "copy", "index", "analyze" or "done"."""

    phase: str
    table: str
    bytes_copied: int = 0
    rows: int | None = None


@dataclass(frozen=True)
class LoadResult:
    """What a load did: rows per table, database size, timings; ``reused`` if nothing loaded."""

    scale: float
    reused: bool
    seconds: float
    rows: dict[str, int]
    database_bytes: int
    phase_seconds: dict[str, float] = field(default_factory=dict)


ProgressCallback = Callable[[LoadProgress], None]


def _check_scale(scale: object) -> float:
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise WorkloadError(f"TPC-H scale factor must be a number > 0, but got {scale!r}")
    value = float(scale)
    if not (math.isfinite(value) and value > 0):
        raise WorkloadError(f"TPC-H scale factor must be a number > 0, but got {scale!r}")
    return value


def loaded_scale(conn: psycopg.Connection[TupleRow]) -> float | None:
    """The scale factor of a finished TPC-H load in this database, or None if there is none."""
    row = conn.execute("select to_regclass(%s) is not null", (MARKER_TABLE,)).fetchone()
    if not row or not row[0]:
        return None
    found = conn.execute(
        sql.SQL("select scale from {} order by loaded_at desc limit 1").format(
            sql.Identifier(MARKER_TABLE)
        )
    ).fetchone()
    if found is None:
        return None
    missing = [
        t for t in TABLES
        if not relation_exists(conn, t)
    ]  # fmt: skip
    if missing:
        logger.warning("TPC-H marker present but tables %s are missing; reloading", missing)
        return None
    return float(found[0])


def _recorded_rows(conn: psycopg.Connection[TupleRow]) -> dict[str, int]:
    found = conn.execute(
        sql.SQL("select row_counts from {} order by loaded_at desc limit 1").format(
            sql.Identifier(MARKER_TABLE)
        )
    ).fetchone()
    recorded = found[0] if found else {}
    return {t: int(recorded[t]) for t in TABLES if t in recorded}


def _database_bytes(conn: psycopg.Connection[TupleRow]) -> int:
    row = conn.execute("select pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def _drop_all(conn: psycopg.Connection[TupleRow]) -> None:
    for table in (MARKER_TABLE, *TABLES):
        conn.execute(sql.SQL("drop table if exists {} cascade").format(sql.Identifier(table)))


def _copy_from(
    conn: psycopg.Connection[TupleRow],
    table: str,
    source: IO[bytes],
    progress: ProgressCallback | None,
) -> int:
    """Create ``table`` and COPY the CSV ``source`` into it in one transaction; return rows."""
    copied = 0
    reported = 0
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            sql.SQL("create table {} ({})").format(sql.Identifier(table), sql.SQL(COLUMNS[table]))
        )
        # FREEZE: the table is new in this transaction, so rows are written frozen and
        # all-visible, and the benchmark never pays for hint bits or an anti-wraparound vacuum.
        statement = sql.SQL("copy {} from stdin (format csv, header true, freeze true)").format(
            sql.Identifier(table)
        )
        with cur.copy(statement) as copy:
            while chunk := source.read(CHUNK_BYTES):
                copy.write(chunk)
                copied += len(chunk)
                if progress and copied - reported >= _PROGRESS_EVERY_BYTES:
                    reported = copied
                    progress(LoadProgress("copy", table, copied))
        rows = cur.rowcount
    if progress:
        progress(LoadProgress("copy", table, copied, rows))
    return rows


def _check_rows(table: str, rows: int, scale: float) -> None:
    rule = ROW_COUNTS[table]
    if not rule.accepts(rows, scale):
        raise WorkloadError(
            f"TPC-H table {table} must hold about {rule.expected(scale)} rows at scale "
            f"{scale_arg(scale)}, but {rows} were loaded; the generator output is incomplete"
        )


def _create_indexes(conn: psycopg.Connection[TupleRow], progress: ProgressCallback | None) -> None:
    conn.execute("set maintenance_work_mem = '256MB'")
    for table, columns in PRIMARY_KEYS.items():
        if progress:
            progress(LoadProgress("index", table))
        conn.execute(
            sql.SQL("alter table {} add primary key ({})").format(
                sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
            )
        )
    for table, columns in FOREIGN_KEY_INDEXES:
        if progress:
            progress(LoadProgress("index", table))
        name = f"{table}_{'_'.join(columns)}_idx"
        conn.execute(
            sql.SQL("create index {} on {} ({})").format(
                sql.Identifier(name),
                sql.Identifier(table),
                sql.SQL(", ").join(map(sql.Identifier, columns)),
            )
        )


def _write_marker(conn: psycopg.Connection[TupleRow], scale: float, rows: dict[str, int]) -> None:
    marker = sql.Identifier(MARKER_TABLE)
    conn.execute(
        sql.SQL(
            "create table {} (scale float8 not null, loaded_at timestamptz not null default now(),"
            " row_counts jsonb not null, generator text not null)"
        ).format(marker)
    )
    conn.execute(
        sql.SQL("insert into {} (scale, row_counts, generator) values (%s, %s, %s)").format(marker),
        (scale, json.dumps(rows), GENERATOR),
    )


def load_tpch(
    dsn: str,
    scale: float,
    *,
    workdir: Path | str | None = None,
    progress: ProgressCallback | None = None,
    replace: bool = False,
) -> LoadResult:
    """Load TPC-H at ``scale`` into the database ``dsn`` names, or reuse a load at that scale.

    The generator writes CSV files (about 1.1 GB per scale factor) into a temporary
    directory, removed afterwards, or into ``<workdir>/sf<scale>``, kept and reused by later
    loads; each file is streamed into COPY in 1 MiB chunks.
    """
    scale = _check_scale(scale)
    started = time.monotonic()
    with connect(dsn) as conn:
        conn.execute("select pg_advisory_lock(%s)", (_LOAD_LOCK_KEY,))
        try:
            return _load_locked(conn, dsn, scale, workdir, progress, replace, started)
        except psycopg.Error as exc:
            raise DatabaseError(
                f"loading TPC-H scale {scale_arg(scale)} into {describe_dsn(dsn)} failed: {exc}"
            ) from exc


def _load_locked(
    conn: psycopg.Connection[TupleRow],
    dsn: str,
    scale: float,
    workdir: Path | str | None,
    progress: ProgressCallback | None,
    replace: bool,
    started: float,
) -> LoadResult:
    existing = loaded_scale(conn)
    if existing is not None and math.isclose(existing, scale, rel_tol=1e-9):
        logger.info("TPC-H scale %s already loaded in %s; reusing it", scale, describe_dsn(dsn))
        if progress:
            progress(LoadProgress("done", ""))
        return LoadResult(
            scale, True, time.monotonic() - started, _recorded_rows(conn), _database_bytes(conn)
        )
    if existing is not None and not replace:
        raise WorkloadError(
            f"{describe_dsn(dsn)} already holds TPC-H at scale {scale_arg(existing)}, but scale "
            f"{scale_arg(scale)} was asked for; use another database or replace the data "
            "(replace=True, `harmony tpch load --replace`)"
        )
    _drop_all(conn)
    phases: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="harmony-tpch-") as scratch:
        base = Path(workdir) if workdir is not None else Path(scratch)
        t0 = time.monotonic()
        if progress:
            progress(LoadProgress("generate", ""))
        files = generate_files(TABLES, scale, base / f"sf{scale_arg(scale)}")
        phases["generate"] = time.monotonic() - t0
        rows: dict[str, int] = {}
        t0 = time.monotonic()
        for table in TABLES:
            logger.info("loading TPC-H %s at scale %s", table, scale_arg(scale))
            with open(files[table], "rb") as source:
                rows[table] = _copy_from(conn, table, source, progress)
            _check_rows(table, rows[table], scale)
    phases["copy"] = time.monotonic() - t0
    t0 = time.monotonic()
    _create_indexes(conn, progress)
    phases["index"] = time.monotonic() - t0
    t0 = time.monotonic()
    if progress:
        progress(LoadProgress("analyze", ""))
    conn.execute("analyze")
    phases["analyze"] = time.monotonic() - t0
    _write_marker(conn, scale, rows)
    if progress:
        progress(LoadProgress("done", ""))
    result = LoadResult(
        scale, False, time.monotonic() - started, rows, _database_bytes(conn), phases
    )
    logger.info(
        "loaded TPC-H scale %s in %.1f s (%d MB)",
        scale_arg(scale), result.seconds, result.database_bytes >> 20,
    )
    return result
