"""The aiohttp HTTP/JSON API over a :class:`SessionManager`.

One route table (:data:`ENDPOINTS`) registers the handlers and feeds the OpenAPI document
served at ``/openapi.json``. Errors are always JSON ``{"error": kind, "message": text}``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware

from harmony_base.errors import ProtocolError
from harmony_base.jsontypes import JSONObject
from harmony_base.tokens import CLIENT_SECRET_HEADER
from harmony_core import priordata
from harmony_server.bodies import off_loop, read_body
from harmony_server.endpoint import Endpoint, Handler
from harmony_server.hosted import HostedSession
from harmony_server.manager import SessionManager
from harmony_server.openapi import openapi_document
from harmony_server.priordata_store import prior_from_store, store_session_summaries
from harmony_server.protocol import (
    error_kind,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class AppSettings:
    """What the HTTP layer needs to know: auth token, long-poll cap, metrics renderer."""

    token: str | None = None
    max_wait: float = 60.0
    retry_after: float = 1.0
    #: returns the ``/metrics`` body; empty until the observability layer plugs in
    render_metrics: Callable[[SessionManager], str | bytes] | None = None
    metrics_content_type: str = "text/plain; version=0.0.4; charset=utf-8"


MANAGER = web.AppKey("manager", SessionManager)
SETTINGS = web.AppKey("settings", AppSettings)
CLOSING = web.AppKey("closing", asyncio.Event)


# -- helpers -------------------------------------------------------------------------
def _disconnected(request: web.Request) -> Callable[[], bool]:
    """Whether the client that sent ``request`` has closed its connection."""
    def gone() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()
    return gone


def _session(request: web.Request) -> HostedSession:
    return request.app[MANAGER].get(request.match_info["name"])


def _json(data: object, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


def _client_of(request: web.Request, hosted: HostedSession, body: dict[str, Any]) -> str:
    """The body's client, once the request proved it is that client (its secret header)."""
    client: str = body["client"]
    hosted.authenticate(client, request.headers.get(CLIENT_SECRET_HEADER))
    return client


# -- handlers ------------------------------------------------------------------------
async def healthz(request: web.Request) -> web.Response:
    manager = request.app[MANAGER]
    return _json({"status": "ok", "sessions": len(manager.sessions),
                  "broken": len(manager.broken)})


async def metrics(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    if settings.render_metrics is None:
        return web.Response(text="", content_type="text/plain")
    body = settings.render_metrics(request.app[MANAGER])
    return web.Response(body=body.encode() if isinstance(body, str) else body,
                        headers={"Content-Type": settings.metrics_content_type})


async def openapi(request: web.Request) -> web.Response:
    return _json(openapi_document(ENDPOINTS))


async def list_sessions(request: web.Request) -> web.Response:
    return _json({"sessions": request.app[MANAGER].list()})


async def create_session(request: web.Request) -> web.Response:
    body = await read_body(request, "create")
    manager, exist_ok = request.app[MANAGER], body.get("exist_ok", False)
    # checking a definition and building its strategy and constraint region is pure CPU work
    # that may take long (constraint narrowing): a worker thread does it
    definition = await off_loop("create: checking the definition", manager.parse,
                                 body["definition"])
    hosted = manager.existing(definition, exist_ok=exist_ok)
    created = False
    if hosted is None:
        built = await off_loop("create: building the session", manager.build, definition)
        hosted, created = manager.add(built, exist_ok=exist_ok)
    return _json(hosted.describe(), status=201 if created else 200)


async def get_session(request: web.Request) -> web.Response:
    return _json(_session(request).describe())


async def kill_session(request: web.Request) -> web.Response:
    request.app[MANAGER].kill(request.match_info["name"])
    return _json({"killed": request.match_info["name"]})


async def join(request: web.Request) -> web.Response:
    body = await read_body(request, "join")
    hosted = _session(request)
    secret = hosted.join(body["client"], body.get("host"),
                         request.headers.get(CLIENT_SECRET_HEADER))
    answer = {"session": hosted.name, "client": body["client"],
              "lease_seconds": hosted.definition.lease_seconds,
              "definition": hosted.definition.to_dict()}
    if secret is not None:  # a new client: the only time its secret is ever sent
        answer["secret"] = secret
    return _json(answer)


async def _fetch_answer(request: web.Request, hosted: HostedSession, client: str,
                        wait: float, request_id: str | None) -> JSONObject:
    """A trial for ``client``, or "wait" with the best so far (the fetch answer's body)."""
    settings = request.app[SETTINGS]
    result = await hosted.fetch(client, min(wait, settings.max_wait), request=request_id,
                                closing=request.app[CLOSING],
                                disconnected=_disconnected(request))
    if result.assignment is not None:
        a = result.assignment
        return {"status": "trial", "trial_id": a.trial_id, "point": a.point,
                "candidate": a.candidate, "lease_expires": result.lease_expires}
    return {"status": "wait", "best": hosted.best(), "paused": hosted.core.paused,
            "converged": hosted.core.converged, "retry_after": settings.retry_after}


async def fetch(request: web.Request) -> web.Response:
    body = await read_body(request, "fetch")
    hosted = _session(request)
    return _json(await _fetch_answer(request, hosted, _client_of(request, hosted, body),
                                     float(body.get("wait", 0.0)), body.get("request")))


async def report(request: web.Request) -> web.Response:
    body = await read_body(request, "report")
    hosted = _session(request)
    client = _client_of(request, hosted, body)
    failure = (body.get("reason") or "failed") if body.get("failure") else None
    answer: JSONObject = hosted.report_answer(int(body["trial_id"]), body.get("value"),
                                                  failure, client)
    answer["converged"] = hosted.core.converged
    if "next" in body:
        if not client:
            raise ProtocolError("report: 'next' (a piggybacked fetch) needs 'client'")
        nxt = body["next"]
        answer["next"] = await _fetch_answer(request, hosted, client,
                                             float(nxt.get("wait", 0.0)), nxt.get("request"))
    return _json(answer)


async def heartbeat(request: web.Request) -> web.Response:
    body = await read_body(request, "heartbeat")
    hosted = _session(request)
    expires = hosted.heartbeat(int(body["trial_id"]), _client_of(request, hosted, body))
    return _json({"trial_id": body["trial_id"], "lease_expires": expires})


async def best(request: web.Request) -> web.Response:
    hosted = _session(request)
    return _json({"best": hosted.best(), "converged": hosted.core.converged})


async def pause(request: web.Request) -> web.Response:
    await read_body(request, "empty")
    hosted = _session(request)
    hosted.pause()
    return _json({"status": hosted.status()})


async def resume(request: web.Request) -> web.Response:
    await read_body(request, "empty")
    hosted = _session(request)
    hosted.resume()
    return _json({"status": hosted.status()})


async def restart(request: web.Request) -> web.Response:
    body = await read_body(request, "restart")
    hosted = _session(request)
    hosted.restart(body.get("point"))
    return _json({"status": hosted.status()})


async def leave(request: web.Request) -> web.Response:
    body = await read_body(request, "leave")
    hosted = _session(request)
    released = hosted.leave(_client_of(request, hosted, body))
    return _json({"released": released})


async def trials(request: web.Request) -> web.Response:
    return _json({"trials": _session(request).trial_dicts()})


async def list_priors(request: web.Request) -> web.Response:
    return _json({"sessions": store_session_summaries(request.app[MANAGER].store)})


async def get_prior(request: web.Request) -> web.Response:
    """One stored session as prior data; a hosted session's status is its live one."""
    manager, name = request.app[MANAGER], request.match_info["name"]
    hosted = manager.sessions.get(name)
    prior = prior_from_store(manager.store, name,
                             status=hosted.status() if hosted is not None else None)
    return _json(priordata.to_dict(prior))


_S = "/sessions/{name}"
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/healthz", healthz, "healthz", "Liveness: the server is up and serving.",
             public=True),
    Endpoint("GET", "/metrics", metrics, "metrics",
             "Prometheus metrics (text exposition format; reserved).", public=True),
    Endpoint("GET", "/openapi.json", openapi, "openapi", "This OpenAPI 3 document.", public=True),
    Endpoint("GET", "/sessions", list_sessions, "listSessions",
             "Every session with its status and best result so far."),
    Endpoint("POST", "/sessions", create_session, "createSession",
             "Create a session from a definition (SessionDefinition.to_dict()); with exist_ok an "
             "identical existing session is returned (200) instead of a 409.", "create",
             (201, 200, 400, 409)),
    Endpoint("GET", _S, get_session, "getSession",
             "Status, best, convergence, trial counts and definition of one session.",
             responses=(200, 404)),
    Endpoint("DELETE", _S, kill_session, "killSession",
             "Kill a session: end it and delete everything stored for it.", responses=(200, 404)),
    Endpoint("POST", _S + "/join", join, "join",
             "Join a session as a client, with host metadata (hostname, CPUs, RAM, OS). A new "
             "client id is answered its client 'secret', once; fetch, report, heartbeat and "
             "leave for that client must send it in the X-Harmony-Client-Secret header. A "
             "client id that has joined may join again only with its secret (409 "
             "client_exists otherwise: join under another id).", "join", (200, 400, 404, 409)),
    Endpoint("POST", _S + "/fetch", fetch, "fetch",
             "Long-poll for a point to measure: answers a leased trial as soon as one is ready, "
             "or status 'wait' with the best so far and a retry hint after 'wait' seconds. A "
             "repeated 'request' id gets the same trial again (safe retries). Needs the "
             "client's secret (403 without it, 404 client_not_found before its join).",
             "fetch", (200, 400, 403, 404), client_secret=True),
    Endpoint("POST", _S + "/report", report, "report",
             "Report a trial's value, or a failure with a reason. A trial's first report "
             "stands: a second one answers accepted: false, with duplicate: true when it "
             "repeats the recorded outcome (a retry) and duplicate: false with a 'reason' when "
             "it differs (rejected). Only the client holding the trial may report it (409 "
             "lease_lost otherwise, without naming the holder); needs the client's secret "
             "(403).", "report", (200, 400, 403, 404, 409), client_secret=True),
    Endpoint("POST", _S + "/heartbeat", heartbeat, "heartbeat",
             "Extend a leased trial's lease by the session's lease_seconds; 409 if the lease "
             "was lost; needs the client's secret (403).", "heartbeat", (200, 400, 403, 404, 409),
             client_secret=True),
    Endpoint("GET", _S + "/best", best, "best", "The best point and value so far.",
             responses=(200, 404)),
    Endpoint("POST", _S + "/pause", pause, "pause",
             "Pause: fetches answer 'wait' until resumed.", "empty", (200, 404)),
    Endpoint("POST", _S + "/resume", resume, "resume", "Resume a paused session.", "empty",
             (200, 404)),
    Endpoint("POST", _S + "/restart", restart, "restart",
             "Restart the search, optionally from a point.", "restart", (200, 400, 404)),
    Endpoint("POST", _S + "/leave", leave, "leave",
             "A client leaves; its leased trials are handed out again. Needs the client's "
             "secret (403).", "leave", (200, 400, 403, 404), client_secret=True),
    Endpoint("GET", _S + "/trials", trials, "listTrials",
             "Every trial of the session with status, value, client and lease information.",
             responses=(200, 404)),
    Endpoint("GET", "/priors", list_priors, "listPriors",
             "Every session of the store (live, closed or imported) as {name, status, "
             "created}: the prior data GET /priors/{name} serves."),
    Endpoint("GET", "/priors/{name}", get_prior, "getPrior",
             "One stored session (live, closed or imported) as prior data: definition, "
             "status, created, hosts and every trial (harmony_core.priordata.to_dict; harmony "
             "export, report and warm starts read it).", responses=(200, 404)),
)


#: the operations every measured trial makes (routed first)
_HOT_OPERATIONS = frozenset({"fetch", "report", "heartbeat"})


# -- middlewares ------------------------------------------------------------------------
def _error(kind: str, message: str, status: int, **extra: object) -> web.Response:
    return web.json_response({"error": kind, "message": message, **extra}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into a JSON error body with the right 4xx/5xx status."""
    manager = request.app[MANAGER]
    started = time.perf_counter()
    route = request.match_info.route.resource.canonical if request.match_info.route.resource \
        else "unmatched"
    manager.stats.requests[route] += 1
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = {413: "too_large", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status, "http_error")
        manager.stats.errors[kind] += 1
        answer = _error(kind, exc.text or exc.reason, exc.status)
        if "Allow" in exc.headers:  # a 405 says which methods the path takes
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer
    except Exception as exc:
        kind, status = error_kind(exc)
        manager.stats.errors[kind] += 1
        if kind == "internal":
            logger.exception("internal error on %s %s", request.method, request.path)
            return _error(kind, f"internal error: {type(exc).__name__}: {exc}", status)
        return _error(kind, str(exc), status)
    finally:
        elapsed = time.perf_counter() - started
        manager.stats.request_latency.observe(elapsed)
        per_operation = manager.stats.route_latency.get(request.match_info.route.name or "")
        if per_operation is not None:
            per_operation.observe(elapsed)


def _auth_middleware(token: str, public: set[str]) -> Middleware:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in public:
            # a header that is not UTF-8 arrives with its bytes escaped: compare them as sent
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                request.app[MANAGER].stats.errors["unauthorized"] += 1
                return _error("unauthorized", "missing or wrong bearer token "
                              "(send 'Authorization: Bearer <token>')", 401)
        return await handler(request)

    return auth


def make_app(manager: SessionManager, settings: AppSettings | None = None, *,
             max_body: int = 1 << 20) -> web.Application:
    """Build the aiohttp application; bodies larger than ``max_body`` bytes get a 413."""
    settings = settings or AppSettings()
    middlewares: list[Middleware] = [error_middleware]
    if settings.token:
        middlewares.append(_auth_middleware(settings.token,
                                            {e.path for e in ENDPOINTS if e.public}))
    app = web.Application(middlewares=middlewares, client_max_size=max_body)
    app[MANAGER] = manager
    app[SETTINGS] = settings
    app[CLOSING] = asyncio.Event()
    # the router tries the routes under a path prefix in the order they were added: the
    # commands that carry the tuning load first (a stable sort keeps the rest in table order)
    for endpoint in sorted(ENDPOINTS, key=lambda e: e.operation not in _HOT_OPERATIONS):
        if endpoint.method == "GET":  # HEAD too: the GET's headers without its body
            app.router.add_get(endpoint.path, endpoint.handler, name=endpoint.operation)
        else:
            app.router.add_route(endpoint.method, endpoint.path, endpoint.handler,
                                 name=endpoint.operation)
    return app
