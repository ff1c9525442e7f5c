"""Request bodies: JSON or YAML (no aliases, a bounded number of values) decoded and checked
against the protocol schema; large bodies and other CPU-bound request work on a worker thread
with a deadline in CPU seconds, so the event loop goes on serving and a loaded machine does
not refuse work it merely runs slowly."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import yaml
from aiohttp import web

from harmony_base.errors import ProtocolError
from harmony_base.jsontypes import JSONObject
from harmony_server.protocol import MAX_NODES, UnsupportedMediaError, validate_request

T = TypeVar("T")

#: the media types a request body may have (no Content-Type at all is read as JSON)
JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml"})


#: bodies larger than this are decoded and checked on a worker thread: the loop goes on serving
OFF_LOOP_BYTES = 16 * 1024
#: CPU seconds a request may spend decoding its body or building a session (on a worker
#: thread); CPU, not wall-clock, time: on a loaded machine the thread waits for a core
WORK_DEADLINE = 10.0
#: wall-clock seconds after which such work is refused however little CPU it used (a backstop
#: for work that waits instead of computing; CPU-bound work reaches WORK_DEADLINE first)
WALL_BACKSTOP = 300.0
#: how often the loop looks at the worker's CPU clock (seconds)
_CPU_CHECK = 0.05


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without anchors and aliases (an alias bomb would expand without bound), and
    with at most :data:`MAX_NODES` nodes (PyYAML spends ~20 µs on each)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("anchors and aliases (&name, *name) are not accepted")
        self._nodes = getattr(self, "_nodes", 0) + 1
        if self._nodes > MAX_NODES:
            raise yaml.YAMLError(f"the document holds more than {MAX_NODES} values; send a "
                                 f"smaller one")
        return super().compose_node(parent, index)


def decode(raw: bytes, content_type: str, operation: str) -> object:
    """The body as plain data, from JSON or YAML; 415 for any other media type."""
    if content_type in YAML_TYPES:
        try:
            return yaml.load(raw, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader
        except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
            raise ProtocolError(f"{operation}: the request body is not valid YAML: "
                                f"{str(exc)[:300]}") from None
    if content_type not in JSON_TYPES and content_type != "application/octet-stream":
        raise UnsupportedMediaError(
            f"{operation}: request bodies of type {content_type!r} are not accepted; send "
            f"'Content-Type: application/json' (or application/yaml for a YAML body)")
    try:
        return json.loads(raw)
    except RecursionError:
        raise ProtocolError(f"{operation}: the request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{operation}: the request body is not valid JSON: {exc}") from None


def decode_and_validate(raw: bytes, content_type: str, operation: str) -> JSONObject:
    # aiohttp reports a missing Content-Type as application/octet-stream: read it as JSON
    data: object = decode(raw, content_type, operation) if raw.strip() else {}
    return validate_request(operation, data)


class _CpuClock:
    """The CPU time a worker thread spent on one piece of work, read from another thread."""

    #: whether threads have a CPU clock here (Linux and most Unixes)
    supported = hasattr(time, "pthread_getcpuclockid")

    def __init__(self) -> None:
        self._clock: int | None = None
        self._started = 0.0

    def start(self) -> None:
        """Called on the worker thread as the work begins."""
        if self.supported:
            self._started = time.thread_time()
            self._clock = time.pthread_getcpuclockid(threading.get_ident())

    def used(self) -> float:
        """CPU seconds since :meth:`start` (0 while the work waits for a thread)."""
        if self._clock is None:
            return 0.0
        try:
            return time.clock_gettime(self._clock) - self._started
        except OSError:  # the thread has ended (its work is done)
            return 0.0


async def off_loop(what: str, work: Callable[..., T], *args: Any) -> T:
    """Run CPU-bound request work on a worker thread, at most :data:`WORK_DEADLINE` CPU
    seconds (past it the request is refused; the thread's result is dropped, nothing was
    changed). Where threads have no CPU clock the deadline counts wall-clock seconds."""
    clock = _CpuClock()

    def timed() -> T:
        clock.start()
        return work(*args)

    # the default executor's threads outlive the work, so the clock stays readable
    future = asyncio.get_running_loop().run_in_executor(None, timed)
    started = time.monotonic()
    try:
        while True:
            done, _ = await asyncio.wait({future}, timeout=_CPU_CHECK)
            if done:
                return future.result()
            wall = time.monotonic() - started
            cpu = clock.used() if clock.supported else wall
            if cpu > WORK_DEADLINE or wall > WALL_BACKSTOP:
                spent = (f"{cpu:.2f} s of CPU in {wall:.2f} s" if clock.supported
                         else f"{wall:.2f} s")
                raise ProtocolError(f"{what} took more than {WORK_DEADLINE:g} s (it used "
                                    f"{spent}); send a smaller request")
    finally:
        future.cancel()  # a refused (or abandoned) request drops the thread's result


async def read_body(request: web.Request, operation: str) -> dict[str, Any]:
    raw = await request.read()  # raises 413 past client_max_size
    if len(raw) > OFF_LOOP_BYTES:  # small bodies (every fetch and report) stay on the loop
        return await off_loop(f"{operation}: reading the request body", decode_and_validate,
                               raw, request.content_type, operation)
    return decode_and_validate(raw, request.content_type, operation)
