"""The user's SQL as pgbench scripts: reading ``.pgbench`` scripts and plain ``.sql`` files.

A ``.pgbench`` file is a pgbench custom script (``\\set`` lines draw parameters, SQL commands
end with ``;`` or with ``\\gset``). A ``.sql`` file is a list of statements, each its own unit
of work, with ``-- @weight N`` and ``-- @param name = <pgbench expression>`` comment lines
just above it; each statement becomes a one-statement pgbench script. Either way every
command keeps the file and line it came from, so an error can name them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harmony_base.errors import ConfigError

#: variables pgbench defines itself (and ``scale``, which ``-D`` or ``-s`` sets)
BUILTIN_VARIABLES = frozenset({"client_id", "default_seed", "random_seed", "scale"})
#: the first words of SQL commands that only read or delimit a transaction
READ_KEYWORDS = frozenset({"select", "with", "values", "table", "show", "explain"})
TRANSACTION_KEYWORDS = frozenset({"begin", "start", "commit", "end", "rollback", "abort",
                                  "savepoint", "release", "set", "reset"})
#: commands PREPARE does not accept that change the database or the server (they cannot be
#: checked before they run; every other command is prepared, so a typo is a syntax error)
UTILITY_COMMANDS = frozenset({"create", "drop", "alter", "truncate", "vacuum", "analyze",
                              "cluster", "reindex", "lock", "grant", "revoke", "comment",
                              "refresh", "copy", "call", "do", "discard", "notify", "listen",
                              "unlisten", "checkpoint", "security", "import", "reassign",
                              "prepare", "execute", "deallocate", "declare", "fetch", "move",
                              "close", "load"})
_VARIABLE = re.compile(r"(?<!:):([A-Za-z_][A-Za-z0-9_]*)")
_WEIGHT = re.compile(r"^--\s*@weight\s+(\S+)\s*$")
_PARAM = re.compile(r"^--\s*@param\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+?)\s*$")


@dataclass(frozen=True)
class Command:
    """One command of a script: a meta-command (``\\set x ...``) or an SQL command."""

    line: int
    text: str
    meta: str | None = None  # the meta-command's name (set, sleep, gset...), None for SQL
    gset: str | None = None  # an SQL command ended by \gset [prefix]: the prefix ("" if none)

    @property
    def keyword(self) -> str:
        """The SQL command's first word, lower case (empty for a meta-command)."""
        if self.meta is not None:
            return ""
        word = re.match(r"\s*\(*\s*([A-Za-z]+)", self.text)
        return word.group(1).lower() if word else ""

    @property
    def first_line(self) -> str:
        return self.text.strip().splitlines()[0] if self.text.strip() else ""


@dataclass(frozen=True)
class Script:
    """A pgbench script with its weight; ``source`` names the file (and line, for a .sql
    statement) and is the label its transactions are counted under."""

    source: str
    path: Path
    weight: int
    commands: tuple[Command, ...]
    #: the text handed to pgbench (the file itself, or the script made from a .sql statement)
    text: str = field(repr=False, default="")
    #: the file as shown in messages (``source`` without a .sql statement's line)
    file: str = ""

    @property
    def sql(self) -> tuple[Command, ...]:
        return tuple(c for c in self.commands if c.meta is None)


def variables_in(text: str) -> list[str]:
    """The ``:name`` variable references of an SQL text, outside quotes and comments."""
    return _VARIABLE.findall(blank_quoted(text))


def blank_quoted(text: str) -> str:
    """``text`` with string literals, quoted identifiers and comments blanked out."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        end = _skip_quoted(text, i)
        if end != i:
            out.append(" " * (end - i))
            i = end
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _skip_quoted(text: str, i: int) -> int:
    """The index after a literal/identifier/comment starting at ``i`` (``i`` if none)."""
    c = text[i]
    if c == "'" or c == '"':
        j = i + 1
        while j < len(text):
            if text[j] == c:
                if j + 1 < len(text) and text[j + 1] == c:
                    j += 2
                    continue
                return j + 1
            j += 1
        return len(text)
    if text.startswith("--", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        j = text.find("*/", i + 2)
        return len(text) if j < 0 else j + 2
    if c == "$":
        tag = re.match(r"\$[A-Za-z_]*\$", text[i:])
        if tag and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            j = text.find(tag.group(0), i + len(tag.group(0)))
            return len(text) if j < 0 else j + len(tag.group(0))
    return i


def split_commands(text: str, source: str) -> list[Command]:
    """Split a pgbench script into meta-commands and SQL commands, as pgbench does: a line
    starting with a backslash (outside an SQL command) is a meta-command; an SQL command
    ends at ``;`` or at a ``\\gset`` / ``\\aset``."""
    commands: list[Command] = []
    i, n, line = 0, len(text), 1
    buf: list[str] = []
    buf_line = 0

    def flush(gset: str | None = None) -> None:
        nonlocal buf, buf_line
        body = "".join(buf).strip()
        if body and blank_quoted(body).strip():
            commands.append(Command(line=buf_line, text=body, gset=gset))
        buf, buf_line = [], 0

    while i < n:
        c = text[i]
        pending = blank_quoted("".join(buf)).strip()
        if c == "\\" and not pending:
            command, i, line = _meta_command(text, i, line, source)
            commands.append(command)
            buf, buf_line = [], 0
            continue
        if c == "\\" and pending:
            word = re.match(r"\\([a-z]+)\b\s*([A-Za-z0-9_]*)", text[i:])
            if word and word.group(1) in ("gset", "aset"):
                flush(word.group(2) if word.group(1) == "gset" else "")
                i += len(word.group(0))
                continue
        end = _skip_quoted(text, i)
        if end != i:
            chunk = text[i:end]
            if not chunk.startswith("--") or pending:
                if not buf_line and not chunk.startswith(("--", "/*")):
                    buf_line = line
                buf.append(chunk)
            line += chunk.count("\n")
            i = end
            continue
        if c == ";":
            buf.append(c)
            flush()
        else:
            if not buf_line and not c.isspace():
                buf_line = line
            buf.append(c)
        if c == "\n":
            line += 1
        i += 1
    flush()
    return commands


def _meta_command(text: str, i: int, line: int, source: str) -> tuple[Command, int, int]:
    """The meta-command starting at ``text[i]`` (a backslash), continued over lines that end
    in a backslash; returns it, the offset after it and the line it ends on."""
    n = len(text)
    end = text.find("\n", i)
    end = n if end < 0 else end
    while end < n and text[i:end].rstrip().endswith("\\"):  # a continued meta line
        nxt = text.find("\n", end + 1)
        end, line = (n if nxt < 0 else nxt), line + 1
    words = text[i + 1:end].replace("\\\n", " ").split(None, 1)
    name = words[0].lower() if words else ""
    if name in ("gset", "aset"):
        raise ConfigError(f"{source}, line {line}: \\{name} must follow an SQL command "
                          f"on its line, but none precedes it")
    return Command(line=line, text=text[i:end].strip(), meta=name), end, line


def parse_weighted(spec: str) -> tuple[str, int]:
    """``file@weight`` (weight a whole number >= 1, default 1) as in ``pgbench -f``."""
    path, at, weight = spec.rpartition("@")
    if not at:
        return spec, 1
    if not re.fullmatch(r"\d+", weight.strip()) or int(weight) < 1:
        raise ConfigError(f"the weight in {spec!r} must be a whole number >= 1 "
                          f"(file@weight, as pgbench -f), but got {weight!r}")
    return path, int(weight)


def read_script_file(path: Path, weight: int = 1, *, shown: str | None = None) -> list[Script]:
    """The scripts of one file: a ``.pgbench`` file is one script; a ``.sql`` file gives one
    script per statement (its weight times ``weight``)."""
    name = shown or str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"workload script {name} does not exist (paths are relative to the "
                          f"working directory or to the installed workloads package)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"workload script {name} cannot be read: {exc}") from None
    if path.suffix == ".sql":
        return _sql_file_scripts(text, path, name, weight)
    if path.suffix != ".pgbench":
        raise ConfigError(f"workload script {name} must be a pgbench script (.pgbench) or a "
                          f"file of SQL statements (.sql), but its suffix is {path.suffix!r}")
    commands = split_commands(text, name)
    if not any(c.meta is None for c in commands):
        raise ConfigError(f"workload script {name} holds no SQL command")
    return [Script(source=name, path=path, weight=weight, commands=tuple(commands), text=text,
                   file=name)]


def _sql_file_scripts(text: str, path: Path, name: str, weight: int) -> list[Script]:
    scripts: list[Script] = []
    commands = split_commands(text, name)
    lines = text.splitlines()
    for command in commands:
        if command.meta is not None:
            raise ConfigError(f"{name}, line {command.line}: a .sql file holds SQL statements "
                              f"only; meta-commands such as {command.text.split()[0]} belong "
                              f"in a .pgbench script")
        own_weight = 1
        params: list[tuple[int, str, str]] = []
        k = command.line - 2  # the comment lines just above the statement
        while k >= 0 and lines[k].strip().startswith("--"):
            raw = lines[k].strip()
            if (m := _WEIGHT.match(raw)) is not None:
                if not re.fullmatch(r"\d+", m.group(1)) or int(m.group(1)) < 1:
                    raise ConfigError(f"{name}, line {k + 1}: @weight must be a whole number "
                                      f">= 1, but got {m.group(1)!r}")
                own_weight = int(m.group(1))
            elif (p := _PARAM.match(raw)) is not None:
                params.insert(0, (k + 1, p.group(1), p.group(2)))
            elif raw.startswith(("--@", "-- @")):
                raise ConfigError(f"{name}, line {k + 1}: unknown annotation {raw!r}; use "
                                  f"'-- @weight N' or '-- @param name = expression'")
            k -= 1
        sets = tuple(Command(line=ln, text=f"\\set {var} {expr}", meta="set")
                     for ln, var, expr in params)
        body = command.text if command.text.rstrip().endswith(";") else command.text + ";"
        script_text = "".join(f"\\set {var} {expr}\n" for _, var, expr in params) + body + "\n"
        scripts.append(Script(source=f"{name}:{command.line}", path=path,
                              weight=own_weight * weight, commands=(*sets, command),
                              text=script_text, file=name))
    if not scripts:
        raise ConfigError(f"workload file {name} holds no SQL statement")
    return scripts


def defined_by(command: Command) -> list[str]:
    """The variables a meta-command sets (``\\set``, ``\\setshell``)."""
    if command.meta in ("set", "setshell"):
        parts = command.text.split(None, 2)
        return [parts[1]] if len(parts) > 1 else []
    return []
