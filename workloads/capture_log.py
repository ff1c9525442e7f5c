"""Reading a capture's server log (:mod:`workloads.capture`) into the statements of a replay
file and its units: each session's executions with their bound parameters, grouped into
transactions (BEGIN .. COMMIT) or single statements, in the order each unit began. A
transaction cut by the capture's start (its COMMIT seen, its BEGIN not) is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from workloads.replay import CapturedStatement, Execution
from workloads.script_file import READ_KEYWORDS, blank_quoted

_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_DURATION = re.compile(r"^duration: ([\d.]+) ms  (statement|execute [^:]*|parse [^:]*|"
                       r"bind [^:]*): (.*)$", re.S)
_PARAM = re.compile(r"\$(\d+) = (NULL|'(?:[^']|'')*')", re.S)
_BEGIN = frozenset({"begin", "start"})
_END = frozenset({"commit", "end", "rollback", "abort"})
_WRITE_WORD = re.compile(r"\b(insert|update|delete|merge)\b", re.I)


@dataclass
class _Session:
    open: list[tuple[int, Execution]] | None = None  # (sequence, execution) of a transaction
    began: bool = False  # a BEGIN of this session was seen
    #: units of this session before its first BEGIN: the rest of a transaction that began
    #: before the capture, if a lone COMMIT follows (then they are dropped)
    before_begin: list[int] = field(default_factory=list)


@dataclass
class ParsedLog:
    """Executions grouped into units, in the order each unit began."""

    statements: list[CapturedStatement] = field(default_factory=list)
    units: list[tuple[Execution, ...]] = field(default_factory=list)
    sessions: int = 0
    busy_ms: float = 0.0
    records: int = 0


def _keyword(text: str) -> str:
    word = re.match(r"\s*\(*\s*([A-Za-z]+)", text)
    return word.group(1).lower() if word else ""


def _single(text: str) -> bool:
    return ";" not in blank_quoted(text).strip().rstrip(";")


def _writes(text: str) -> bool:
    keyword = _keyword(text)
    if keyword in _BEGIN | _END | {"set", "reset", "savepoint", "release"}:
        return False
    if keyword in READ_KEYWORDS:
        return keyword == "with" and bool(_WRITE_WORD.search(blank_quoted(text)))
    return True


def _records(text: str, token: str) -> Iterator[tuple[str, str, int, str, str]]:
    """(session, database, queryid, level, message) of every log record with the capture's
    prefix (the queryid is 0 when the server computes none)."""
    head = re.compile(rf"^\S+ \S+ \S+ hcap-{re.escape(token)} (\S+) (\S*) (-?\d+) "
                      rf"([A-Z]+):  (.*)$")
    current: list[str] | None = None

    def record(parts: list[str]) -> tuple[str, str, int, str, str]:
        return parts[0], parts[1], int(parts[2]), parts[3], "\n".join(parts[4:])

    for line in text.split("\n"):
        m = head.match(line)
        if m is not None:
            if current is not None:
                yield record(current)
            current = list(m.groups())
        elif current is not None and not _TIMESTAMP.match(line):
            current.append(line)
        else:
            if current is not None:
                yield record(current)
            current = None
    if current is not None:
        yield record(current)


def parse_capture_log(text: str, token: str, database: str, exclude_pids: set[int]
                      ) -> ParsedLog:
    """The statements, units and concurrency of ``database`` in a capture's log text."""
    parser = _LogParser()
    for session, db, queryid, level, message in _records(text, token):
        parser.parsed.records += 1
        pid = int(session.rsplit(".", 1)[-1], 16) if "." in session else -1
        if db != database or pid in exclude_pids:
            continue
        # "parameters: $1 = '42'" up to PostgreSQL 15, "Parameters: ..." from 16 on
        if level == "DETAIL" and message.startswith(("parameters: ", "Parameters: ")):
            parser.parameters(session, message)
        elif level == "LOG":
            parser.log(session, queryid, message)
    return parser.result()


class _LogParser:
    """The state of one pass over a capture's log records (see :func:`parse_capture_log`)."""

    def __init__(self) -> None:
        self.parsed = ParsedLog()
        self.index: dict[str, int] = {}
        self.calls: dict[int, int] = {}
        self.total: dict[int, float] = {}
        self.sessions: dict[str, _Session] = {}
        self.used: set[str] = set()
        self.started: list[tuple[int, tuple[Execution, ...]]] = []
        #: the session's last execute's parameters
        self.last: dict[str, list[str | None] | None] = {}
        #: session -> (seq, statement, ms)
        self.pending: dict[str, tuple[int, int, float]] = {}
        #: sessions whose last LOG record was an execute: their next DETAIL is its parameters
        #: (a bind's DETAIL, logged before the execute, is not)
        self.executed: set[str] = set()
        #: units (by sequence) that were parts of cut transactions
        self.dropped: set[int] = set()
        self.seq = 0

    def parameters(self, session: str, message: str) -> None:
        """A DETAIL record: the parameters of the session's last execute, if it was one."""
        if session in self.executed:
            self.last[session] = [None if v == "NULL" else v[1:-1].replace("''", "'")
                                  for _, v in _PARAM.findall(message)]
            self.executed.discard(session)

    def log(self, session: str, queryid: int, message: str) -> None:
        """A LOG record: a statement's duration makes it the session's pending execution."""
        self.executed.discard(session)
        m = _DURATION.match(message)
        if m is None:
            return
        self.finish(session)
        kind = m.group(2).split(" ", 1)[0]
        if kind in ("parse", "bind"):
            return
        self.executed.add(session)
        i = self._statement(m.group(3).strip(), queryid)
        ms = float(m.group(1))
        self.calls[i] = self.calls.get(i, 0) + 1
        self.total[i] = self.total.get(i, 0.0) + ms
        self.parsed.busy_ms += ms
        self.seq += 1
        self.pending[session] = (self.seq, i, ms)
        self.last.pop(session, None)

    def _statement(self, statement_text: str, queryid: int) -> int:
        """The index of a statement's text, added on its first execution."""
        statements = self.parsed.statements
        if statement_text not in self.index:
            self.index[statement_text] = len(statements)
            statements.append(CapturedStatement(f"s{len(statements) + 1}", statement_text, 0,
                                                0.0, _writes(statement_text), queryid or None))
        return self.index[statement_text]

    def finish(self, session: str) -> None:
        """Place the session's pending execution (its parameters are known now)."""
        if session not in self.pending:
            return
        at, statement, _ = self.pending.pop(session)
        execution: Execution = (statement, self.last.pop(session, None))
        state = self.sessions.setdefault(session, _Session())
        text = self.parsed.statements[statement].sql
        keyword = _keyword(text)
        if keyword in _BEGIN and _single(text):
            if state.open:
                self.started.append((state.open[0][0], tuple(e for _, e in state.open)))
            state.open, state.began = [(at, execution)], True
        elif keyword in _END and _single(text):
            if state.open:
                state.open.append((at, execution))
                self.started.append((state.open[0][0], tuple(e for _, e in state.open)))
            elif not state.began:  # its BEGIN came before the capture: drop the fragment
                self.dropped.update(state.before_begin)
            state.open = None
            state.before_begin = []
        elif state.open is not None:
            state.open.append((at, execution))
        else:
            self.started.append((at, (execution,)))
            if not state.began:
                state.before_begin.append(at)
        self.used.add(session)

    def result(self) -> ParsedLog:
        """Every pending execution placed; units in the order they began, cut ones dropped."""
        for session in list(self.pending):
            self.finish(session)
        parsed = self.parsed
        self.started.sort(key=lambda item: item[0])
        parsed.units = [unit for at, unit in self.started if at not in self.dropped]
        parsed.statements = [CapturedStatement(s.id, s.sql, self.calls.get(k, 0),
                                               self.total.get(k, 0.0), s.writes, s.queryid)
                             for k, s in enumerate(parsed.statements)]
        parsed.sessions = len(self.used)
        return parsed
