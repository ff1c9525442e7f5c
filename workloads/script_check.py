"""Checking the user's scripts against the database before anything runs or is tuned.

Every SQL command is prepared on the server the way ``pgbench -M prepared`` sends it (each
``:variable`` a ``$n`` parameter of inferred type) inside a transaction that is rolled back,
and explained with NULL parameters to see whether it writes (a ``ModifyTable`` node). An
error names the file, the line and the statement: a syntax error, a missing table or
column, a variable no command sets, a number from ``\\set`` used where the statement wants
another type, a write in a workload that does not allow writes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import pq
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError
from workloads.script_file import (
    BUILTIN_VARIABLES,
    READ_KEYWORDS,
    TRANSACTION_KEYWORDS,
    UTILITY_COMMANDS,
    Command,
    Script,
    blank_quoted,
    defined_by,
)

#: types a number drawn by \set can be bound to (pgbench sends it as text)
_NUMBER_TYPES = frozenset({"int2", "int4", "int8", "numeric", "float4", "float8", "oid",
                           "text", "varchar", "bpchar", "unknown", "money"})


@dataclass(frozen=True)
class CheckedScript:
    """What the check learnt of a script: whether it writes."""

    source: str
    writes: bool


def _to_placeholders(text: str) -> tuple[str, list[str]]:
    """The SQL with each ``:variable`` replaced by ``$1, $2, ...`` (one per occurrence, as
    pgbench does) and the variables in order."""
    blank = blank_quoted(text)
    out, names, last, i = [], [], 0, 0
    while i < len(text):
        if (blank[i] == ":" and (i == 0 or blank[i - 1] != ":") and i + 1 < len(text)
                and (blank[i + 1].isalpha() or blank[i + 1] == "_")):
            j = i + 1
            while j < len(text) and (blank[j].isalnum() or blank[j] == "_"):
                j += 1
            names.append(text[i + 1:j])
            out.append(text[last:i])
            out.append(f"${len(names)}")
            last = i = j
            continue
        i += 1
    out.append(text[last:])
    return "".join(out).rstrip().rstrip(";"), names


def _statement(command: Command) -> str:
    text = " ".join(command.text.split())
    return text if len(text) <= 100 else text[:97] + "..."


def _type_names(conn: psycopg.Connection[TupleRow], oids: Iterable[int]) -> dict[int, str]:
    wanted = sorted(set(oids))
    if not wanted:
        return {}
    rows = conn.execute("SELECT oid::int, typname FROM pg_type WHERE oid = ANY(%s)",
                        [wanted]).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def check_scripts(conn: psycopg.Connection[TupleRow], scripts: Iterable[Script], *,
                  writes: bool, variables: Mapping[str, object] | None = None
                  ) -> list[CheckedScript]:
    """Check every script on ``conn`` (changes nothing); raise :class:`ConfigError` naming the
    file, line and statement at the first problem."""
    checked = []
    for script in scripts:
        checked.append(_check_script(conn, script, writes=writes,
                                     defined=set(BUILTIN_VARIABLES) | set(variables or {})))
    return checked


def _check_script(conn: psycopg.Connection[TupleRow], script: Script, *, writes: bool,
                  defined: set[str]) -> CheckedScript:
    numbers: dict[str, int] = {}  # variables drawn by \set: the line that sets them
    script_writes = False
    for command in script.commands:
        where = f"{script.file or script.source}, line {command.line}"
        if command.meta is not None:
            for name in defined_by(command):
                defined.add(name)
                if command.meta == "set":
                    numbers[name] = command.line
            continue
        query, names = _to_placeholders(command.text)
        missing = [n for n in names if n not in defined]
        if missing:
            raise ConfigError(f"{where}: statement `{_statement(command)}` uses :{missing[0]}, "
                              f"but no \\set before it (nor workload variables) defines it")
        keyword = command.keyword
        if keyword in TRANSACTION_KEYWORDS:
            continue
        if keyword in UTILITY_COMMANDS:
            if not writes:
                raise ConfigError(f"{where}: statement `{_statement(command)}` is a "
                                  f"{keyword.upper()} command, which changes the "
                                  f"database; allow it with writes: true in the workload")
            script_writes = True
            continue
        columns = _prepare(conn, query, len(names), where, command)
        if command.gset is not None:
            defined.update(f"{command.gset}{c}" for c in columns[0])
        types = _type_names(conn, columns[1])
        for name, oid in zip(names, columns[1], strict=True):
            if name in numbers and types.get(oid, "unknown") not in _NUMBER_TYPES:
                raise ConfigError(
                    f"{where}: statement `{_statement(command)}` uses :{name} as "
                    f"{types.get(oid, oid)}, but :{name} is a number drawn by \\set (line "
                    f"{numbers[name]}); cast it in the statement or draw a value of that type")
        if _writes(conn, query, len(names)) or keyword not in READ_KEYWORDS:
            if not writes:
                raise ConfigError(f"{where}: statement `{_statement(command)}` writes "
                                  f"({keyword.upper()}), but the workload does not allow writes; "
                                  f"set writes: true in the workload (--writes on the command "
                                  f"line) to run it")
            script_writes = True
    return CheckedScript(source=script.source, writes=script_writes)


def _prepare(conn: psycopg.Connection[TupleRow], query: str, nparams: int, where: str,
             command: Command) -> tuple[list[str], list[int]]:
    """Prepare ``query`` unnamed (parameters of inferred type) in a rolled-back transaction;
    return the result's column names and the parameters' type oids."""
    pgconn = conn.pgconn
    conn.execute("BEGIN READ ONLY")
    try:
        res = pgconn.prepare(b"", query.encode(), None)
        if res.status != pq.ExecStatus.COMMAND_OK:
            message = (res.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode()
            hint = (res.error_field(pq.DiagnosticField.MESSAGE_HINT) or b"").decode()
            raise ConfigError(f"{where}: statement `{_statement(command)}` is not valid on the "
                              f"database: {message}" + (f" ({hint})" if hint else ""))
        desc = pgconn.describe_prepared(b"")
        names = [(desc.fname(i) or b"").decode() for i in range(desc.nfields)]
        oids = [desc.param_type(i) for i in range(desc.nparams)]
    finally:
        conn.execute("ROLLBACK")
    if len(oids) != nparams:
        raise ConfigError(f"{where}: statement `{_statement(command)}` has {len(oids)} "
                          f"parameters on the server but {nparams} :variables")
    return names, oids


def _writes(conn: psycopg.Connection[TupleRow], query: str, nparams: int) -> bool:
    """Whether the plan modifies a table (also in a CTE), from EXPLAIN with NULL parameters."""
    with conn.transaction(force_rollback=True), psycopg.RawCursor(conn) as cur:
        cur.execute("EXPLAIN (FORMAT JSON, COSTS OFF) " + query, [None] * nparams)
        row = cur.fetchone()
    plan = json.dumps(row[0] if row else [])
    return '"ModifyTable"' in plan


def pgbench_parses(pgbench: Path, scripts: Iterable[Script], variables: Mapping[str, object],
                   workdir: Path) -> None:
    """Let pgbench itself parse the scripts (meta-commands and their expressions): it parses
    before it connects, so it runs against a socket directory that does not exist."""
    args = [str(pgbench), "-n", "-t", "1", "-M", "prepared"]
    for name, value in variables.items():
        args += ["-D", f"{name}={value}"]
    files: dict[str, Script] = {}
    for i, script in enumerate(scripts):
        path = workdir / f"check-{i}.pgbench"
        path.write_text(script.text)
        files[str(path)] = script
        args += ["-f", str(path)]
    args.append(f"host={workdir / 'no-server'} port=1 dbname=x connect_timeout=1")
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)
    err = done.stderr
    if done.returncode == 0 or "connection to server" in err or "could not connect" in err:
        return
    shown = err.strip()
    for name, script in files.items():
        shown = shown.replace(name, script.source)
    raise ConfigError(f"pgbench cannot parse the workload's scripts: {shown}")
