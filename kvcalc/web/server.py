"""Run the app with uvicorn: `kvcalc serve` (127.0.0.1:8000 unless told otherwise)."""

from __future__ import annotations

import threading
import webbrowser

from ..errors import UsageError

MISSING_WEB = "the web page needs starlette and uvicorn: python3 -m pip install starlette uvicorn"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_installed() -> None:
    import importlib.util

    for name in ("starlette", "uvicorn"):
        if importlib.util.find_spec(name) is None:
            raise UsageError(MISSING_WEB)


READ_TIMEOUT_S = 10.0  # a request's headers and body arrive within this of its first byte, or the connection closes


def time_bound_protocol(read_timeout_s: float = READ_TIMEOUT_S):
    """uvicorn's h11 protocol with a deadline on reading each request (headers and body: a client that sends half a
    request, or a body shorter than its Content-Length, loses the connection after `read_timeout_s`, where uvicorn
    alone waits for it forever), and JSON with the security headers for its own 400s (a malformed Content-Length)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from .app import SECURITY_HEADERS

    class TimeBoundH11(H11Protocol):
        _deadline = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if self.conn.their_state not in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED) and not self.transport.is_closing():
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.ERROR):
                self._disarm()  # the whole request is in: the answer's time is the app's

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on this keep-alive connection

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            import json

            body = json.dumps({"error": msg}).encode()
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       *((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items())]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return TimeBoundH11


def serve(host: str = "127.0.0.1", port: int = 8000, open_browser: bool = False, allow_hub: bool = False,
          cache_size: int = 2048) -> None:
    check_installed()
    import uvicorn

    from .app import LOCAL_HOSTS, create_app

    # Loopback binds accept loopback Host headers only (a page elsewhere cannot reach the API through DNS
    # rebinding); binding another address is the user's explicit choice to serve other machines.
    allowed = LOCAL_HOSTS if host in LOOPBACK else ["*"]
    app = create_app(allow_hub=allow_hub, cache_size=cache_size, allowed_hosts=allowed)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    print(f"kvcalc serving {url} (Ctrl-C stops it)" + ("" if host in LOOPBACK else
          f"; bound to {host}: other machines can reach it"), flush=True)
    if open_browser:
        threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                http=time_bound_protocol())
