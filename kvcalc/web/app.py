"""The ASGI app behind `kvcalc serve`: one static page and a JSON API whose payloads are the CLI's.

  GET  /                    the page (kvcalc/web/static/, shipped in the wheel; no CDN, works offline)
  GET  /api/info            what this server offers: options, formats, defaults, whether hub ids and search work
  GET|POST /api/plan        `kvcalc plan --json` (schema kvcalc.plan/1); ?format=csv: `kvcalc plan --csv`
  GET|POST /api/explain     `kvcalc explain` for one row (row=CONFIG, row_engine=vllm|hf) as text, with the row
  GET|POST /api/plots       the numbers of the three plots (kvcalc's sweep data functions), schema kvcalc.plots/1
  GET|POST /api/search      `kvcalc search --json` (kvcalc.search/1)
  GET  /api/gpus            `kvcalc gpus --json`
  GET  /api/models          `kvcalc models --json`

GET takes the CLI's options as query parameters (context=32k&batch=4); POST takes them as a JSON object, plus
`config`, the text of a config.json. Bad input answers 400 with {"error": "<the CLI's one line>"}; nothing else ever
reaches the client (no stack trace: an unexpected failure is logged here and answers 500 with a one-line message).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from importlib import resources

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import inputs, views

log = logging.getLogger("kvcalc.web")

MAX_QUERY_CHARS = 8192
MAX_BODY_BYTES = inputs.MAX_CONFIG_BYTES + 64 * 1024  # a pasted config.json and the options beside it
LOCAL_HOSTS = ["localhost", "127.0.0.1", "[::1]", "::1"]  # Host names a loopback-bound server answers
BODY_TIMEOUT_S = 10.0  # a request body (at most MAX_BODY_BYTES) arrives within this, or the request answers 408
SECURITY_HEADERS = {
    # the page loads only what this server ships: no CDN, no inline script, no framing by other sites
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class BadInput(Exception):
    """Input refused before the CLI parser saw it (size, shape of the request)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _header_list() -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]


class SecurityHeaders:
    """Every response carries SECURITY_HEADERS: the API's, the page, static files, 404s, the Host refusals and
    anything a middleware or handler answers (ASGI middleware outermost, so nothing gets past it)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in _header_list() if k not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _host_name(value: str) -> str:
    """The host of a Host header without its port ('localhost:8000' -> 'localhost', '[::1]:8000' -> '[::1]'); a
    port that is not digits ('127.0.0.1:80@evil.com') leaves the whole text, which matches no allowed name."""
    value = value.strip().lower()
    if value.startswith("[") and "]" in value:
        host, rest = value[: value.index("]") + 1], value[value.index("]") + 1:]
    elif value.count(":") == 1:
        host, rest = value.split(":")[0], ":" + value.split(":")[1]
    else:
        host, rest = value, ""
    return host if rest == "" or (rest.startswith(":") and rest[1:].isdigit()) else value


class LocalHostsOnly:
    """Requests whose Host header names none of `allowed` answer 400 (JSON, with the security headers): a page on
    another site cannot reach a loopback server through DNS rebinding. ["*"] accepts any Host (a non-loopback bind,
    the user's explicit choice)."""

    def __init__(self, app, allowed: list[str]):
        self.app, self.allowed = app, {h.lower() for h in allowed}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and "*" not in self.allowed:
            hosts = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"]
            if len(hosts) != 1 or _host_name(hosts[0]) not in self.allowed:
                await _error(400, "invalid Host header: this server answers " + ", ".join(sorted(self.allowed)))(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


class ResponseCache:
    """Least-recently-used answers by canonical input key: a plan is a pure function of its inputs and the shipped
    data, and a page sends the same inputs again and again as its user types and undoes."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        if self.size <= 0:
            return None
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key, value) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=SECURITY_HEADERS)


def _json_bytes(payload) -> bytes:
    # compact: the C encoder (indent would force the pure-Python one); the values are the CLI's JSON, byte layout aside
    return json.dumps(payload, separators=(",", ":")).encode()


async def _params(request: Request) -> dict:
    """The options of a GET (query string) or a POST (JSON object), size-checked; a repeated name is refused."""
    if request.method == "GET":
        if len(request.url.query) > MAX_QUERY_CHARS:
            raise BadInput(f"query string longer than {MAX_QUERY_CHARS:,} characters")
        items = request.query_params.multi_items()
        params: dict = {}
        for key, value in items:
            if key in params:
                raise BadInput(f"parameter {key!r} given twice")
            params[key] = value
        return params
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise BadInput(f"request body larger than {MAX_BODY_BYTES:,} bytes")
    body = bytearray()

    async def read() -> None:
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > MAX_BODY_BYTES:
                raise BadInput(f"request body larger than {MAX_BODY_BYTES:,} bytes")

    try:  # a body shorter than its Content-Length, or trickled in, does not hold a worker
        await asyncio.wait_for(read(), BODY_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise BadInput(f"request body not received within {BODY_TIMEOUT_S:g} s", status=408) from None
    except ClientDisconnect:  # the server's read deadline closed it (kvcalc/web/server.py), or the client left
        raise BadInput("request body incomplete: the connection closed", status=400) from None
    if not body:
        return {}
    try:
        params = json.loads(bytes(body).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadInput("request body is not a JSON object") from None
    if not isinstance(params, dict):
        raise BadInput("request body must be a JSON object of options")
    return params


def _raw_key(kind: str, params: dict) -> tuple:
    return (kind, "raw", hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest())


def create_app(allow_hub: bool = False, cache_size: int = 2048, allowed_hosts: list[str] | None = None) -> Starlette:
    """The app. `allow_hub`: read hub ids outside the catalog (network); `cache_size`: answers kept (0: none);
    `allowed_hosts`: Host names accepted (default: loopback names only, which stops DNS-rebinding pages; tests add
    starlette's `testserver` here, never production)."""
    cache = ResponseCache(cache_size)

    def answer(kind: str, params: dict) -> Response:
        """Compute one API answer (in a worker thread): bytes from the cache or from the views."""
        fmt = params.get("format") or "json"
        if fmt not in ("json", "csv") or (fmt == "csv" and kind != "plan"):
            return _error(400, f"format {str(fmt)[:20]!r}: only plan answers CSV (format=csv); JSON is the default")
        extra = {k: params.get(k) for k in ("row", "row_engine") if kind == "explain"}
        if kind == "deploy":
            extra = {"kind": params.get("kind")}
        raw_key = _raw_key(kind, params)
        web = inputs.parse(params, allow_hub=allow_hub)
        key = (kind, fmt, web.key, json.dumps(extra, sort_keys=True, default=str))
        hit = cache.get(key)
        if hit is None:
            if kind == "plan" and fmt == "csv":
                hit = (views.plan_csv(web).encode(), "text/csv; charset=utf-8")
            else:
                payload = {"plan": views.plan_payload, "explain": views.explain_payload,
                           "plots": views.plots_payload, "deploy": views.deploy_payload}[kind](web, **extra)
                hit = (_json_bytes(payload), "application/json")
            cache.put(key, hit)
        cache.put(raw_key, hit)
        body, media = hit
        return Response(body, media_type=media, headers=SECURITY_HEADERS)

    def endpoint(kind: str):
        async def handle(request: Request) -> Response:
            try:
                params = await _params(request)
                # the same request text again (a page re-sending its inputs) is answered here, without parsing or a
                # worker thread; a differently spelled but equal request (8k vs 8192) is found after parsing, under
                # the canonical key
                hit = cache.get(_raw_key(kind, params))
                if hit is not None:
                    return Response(hit[0], media_type=hit[1], headers=SECURITY_HEADERS)
                return await run_in_threadpool(answer, kind, params)
            except BadInput as exc:
                return _error(exc.status, str(exc))
            except Exception as exc:  # noqa: BLE001 - input errors are the CLI's lines; anything else is logged
                message = inputs.error_message(exc)
                if message is not None:
                    return _error(400, message)
                log.exception("kvcalc web: %s failed", kind)
                return _error(500, f"internal error ({type(exc).__name__}); the server log has the details")

        return handle

    async def search(request: Request) -> Response:
        try:
            params = await _params(request)
            return await run_in_threadpool(_search_answer, params)
        except BadInput as exc:
            return _error(exc.status, str(exc))
        except Exception as exc:  # noqa: BLE001
            message = inputs.error_message(exc)
            if message is not None:
                return _error(400, message)
            log.exception("kvcalc web: search failed")
            return _error(500, f"internal error ({type(exc).__name__}); the server log has the details")

    def _search_answer(params: dict) -> Response:
        web_search = views.search_payload(params, allow_hub=allow_hub)
        return Response(_json_bytes(web_search), media_type="application/json", headers=SECURITY_HEADERS)

    async def info(request: Request) -> Response:
        payload = await run_in_threadpool(views.info_payload, allow_hub)
        return JSONResponse(payload, headers=SECURITY_HEADERS)

    async def gpus(request: Request) -> Response:
        return Response(await run_in_threadpool(views.gpus_bytes), media_type="application/json",
                        headers=SECURITY_HEADERS)

    async def models(request: Request) -> Response:
        return Response(await run_in_threadpool(views.models_bytes), media_type="application/json",
                        headers=SECURITY_HEADERS)

    static_dir = resources.files("kvcalc.web") / "static"

    async def index(request: Request) -> Response:
        return FileResponse(str(static_dir / "index.html"), headers=SECURITY_HEADERS)

    async def not_found(request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return _error(exc.status_code, str(exc.detail))
        return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=SECURITY_HEADERS)

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("kvcalc web: unhandled %s on %s", type(exc).__name__, request.url.path)
        return _error(500, "internal error")

    routes = [
        Route("/", index),
        Route("/api/info", info),
        Route("/api/plan", endpoint("plan"), methods=["GET", "POST"]),
        Route("/api/explain", endpoint("explain"), methods=["GET", "POST"]),
        Route("/api/plots", endpoint("plots"), methods=["GET", "POST"]),
        Route("/api/deploy", endpoint("deploy"), methods=["GET", "POST"]),
        Route("/api/search", search, methods=["GET", "POST"]),
        Route("/api/gpus", gpus),
        Route("/api/models", models),
        Mount("/static", StaticFiles(directory=str(static_dir)), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders), Middleware(LocalHostsOnly, allowed=allowed_hosts or LOCAL_HOSTS)]
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={HTTPException: not_found, Exception: server_error})
    app.router.redirect_slashes = False  # /api/plan/ is a 404 with a JSON body, not an empty-bodied 307
    app.state.cache = cache
    app.state.allow_hub = allow_hub
    return app
