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
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=2)
