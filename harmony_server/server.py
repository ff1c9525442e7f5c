"""Server lifecycle: configuration, start → serve → graceful shutdown.

``start_server`` runs a server on its own event-loop thread and returns a
:class:`ServerHandle` once it listens (tests use port 0); ``run_server`` blocks until
SIGINT/SIGTERM (the CLI). "Started" and "stop" are events, never sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiohttp import web

try:  # libuv's event loop, in C: a fraction of asyncio's own per-request overhead
    import uvloop
except ImportError:  # not built for every platform (Windows)
    uvloop = None  # type: ignore[assignment]

from harmony_base.errors import HarmonyError
from harmony_base.tokens import read_token_file
from harmony_server.app import CLOSING, AppSettings, make_app
from harmony_server.manager import SessionManager
from harmony_server.metrics import render_metrics as render_prometheus_metrics
from harmony_server.ports import DEFAULT_PORT
from harmony_server.store import Store, default_store_url

logger = logging.getLogger(__name__)

#: the event loop the server runs on (see :func:`new_event_loop`)
EVENT_LOOP = "uvloop" if uvloop is not None else "asyncio"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The server's event loop: uvloop's where it is installed (a dependency on Linux and
    macOS), else asyncio's own; both run the same code."""
    return uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()


@dataclass(frozen=True)
class ServerConfig:
    """Everything one server process needs (one frozen object per process)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    store_url: str | None = None  # None: SQLite under state_dir
    state_dir: Path = field(default_factory=lambda: Path("state"))
    token: str | None = None
    max_body: int = 1 << 20
    max_wait: float = 60.0
    shutdown_timeout: float = 5.0
    sweep_interval: float = 0.05
    synchronous: str = "NORMAL"
    #: builds the ``/metrics`` body from the session manager (None: an empty body)
    render_metrics: Callable[[SessionManager], str | bytes] | None = render_prometheus_metrics

    @property
    def resolved_store_url(self) -> str:
        return self.store_url or default_store_url(self.state_dir)


class _Server:
    """The pieces of a running server inside its event loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.store = Store(config.resolved_store_url, synchronous=config.synchronous)
        self.manager = SessionManager(self.store, sweep_interval=config.sweep_interval)
        self.app: web.Application | None = None
        self.runner: web.AppRunner | None = None
        self.port: int = config.port

    async def start(self) -> None:
        self.manager.recover()
        self.manager.start_sweeper()
        settings = AppSettings(token=self.config.token, max_wait=self.config.max_wait,
                               render_metrics=self.config.render_metrics)
        self.app = make_app(self.manager, settings, max_body=self.config.max_body)
        self.runner = web.AppRunner(self.app, access_log=None,
                                    shutdown_timeout=self.config.shutdown_timeout)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        logger.info("Harmony server listening on http://%s:%d (store %s, %d sessions)",
                    self.config.host, self.port, self.store._safe_url(),
                    len(self.manager.sessions))

    async def stop(self) -> None:
        if self.app is not None:
            self.app[CLOSING].set()
            for hosted in self.manager.sessions.values():
                hosted._notify()  # answer pending long polls now
        if self.runner is not None:
            await self.runner.cleanup()
        await self.manager.close()
        self.store.close()
        logger.info("Harmony server stopped")


class ServerHandle:
    """A server running on a background thread; ``.url``, ``.stop()``, context manager."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._loop = new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._server: _Server | None = None
        self._thread = threading.Thread(target=self._run, name="harmony-server", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            self._server = _Server(self.config)
            await self._server.start()
        except BaseException as exc:
            self._error = exc
            self._started.set()
            if self._server is not None:
                await self._server.stop()
            return
        self._started.set()
        await self._stop.wait()
        await self._server.stop()

    def start(self, timeout: float = 30.0) -> ServerHandle:
        self._thread.start()
        if not self._started.wait(timeout):
            raise HarmonyError(f"server did not start within {timeout} s")
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def _running(self) -> _Server:
        if self._server is None:
            raise HarmonyError("the server has not been started")
        return self._server

    @property
    def port(self) -> int:
        return self._running().port

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def manager(self) -> SessionManager:
        return self._running().manager

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful shutdown: stop accepting, finish in-flight requests, close the store."""
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise HarmonyError(f"server did not stop within {timeout} s")

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(config: ServerConfig | None = None, **overrides: Any) -> ServerHandle:
    """Start a server on a background thread; returns once it listens."""
    config = replace(config or ServerConfig(), **overrides)
    return ServerHandle(config).start()


def run_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT, store_url: str | None = None,
               token_file: str | Path | None = None, *, state_dir: str | Path = "state",
               **options: Any) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully (the CLI's entry point)."""
    token = read_token_file(token_file) if token_file else None
    config = ServerConfig(host=host, port=port, store_url=store_url, state_dir=Path(state_dir),
                          token=token, **options)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(_serve_until_signal(config))


async def _serve_until_signal(config: ServerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = _Server(config)
    try:
        await server.start()
        if config.port == 0 or os.environ.get("HARMONY_PORT_FILE"):
            _write_port_file(config, server.port)
        await stop.wait()
        logger.info("shutting down (signal received)")
    finally:
        await server.stop()


def _write_port_file(config: ServerConfig, port: int) -> None:
    """Tell whoever started us which port we got (``HARMONY_PORT_FILE`` or state_dir/port)."""
    path = Path(os.environ.get("HARMONY_PORT_FILE") or config.state_dir / "server.port")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(path)
