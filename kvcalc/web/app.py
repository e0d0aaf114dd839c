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
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import inputs, views

log = logging.getLogger("kvcalc.web")

MAX_QUERY_CHARS = 8192
MAX_BODY_BYTES = inputs.MAX_CONFIG_BYTES + 64 * 1024  # a pasted config.json and the options beside it
LOCAL_HOSTS = ["localhost", "127.0.0.1", "[::1]", "::1", "testserver"]
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
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise BadInput(f"request body larger than {MAX_BODY_BYTES:,} bytes")
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
    `allowed_hosts`: Host headers accepted (default: loopback names only, which stops DNS-rebinding pages)."""
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
                return _error(400, str(exc))
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
            return _error(400, str(exc))
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
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOCAL_HOSTS)]
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={HTTPException: not_found, Exception: server_error})
    app.state.cache = cache
    app.state.allow_hub = allow_hub
    return app
