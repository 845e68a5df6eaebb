"""A real HTTP server on 127.0.0.1 whose GET runs a given body: the /metrics endpoints the
doctor tests point `vfleet doctor` at."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Body = Callable[[BaseHTTPRequestHandler, threading.Event], None]


def serve(body: Body) -> Iterator[str]:
    """Serve on a free local port; yields the base URL. `stop` is set on teardown so a
    handler still trickling ends with the test."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with contextlib.suppress(OSError):  # the client hung up, as a refusal does
                body(self, stop)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def prometheus_headers(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain; version=0.0.4")
    handler.end_headers()


def text(body: str) -> Body:
    """A body that answers with `body` as Prometheus text."""

    def answer(handler: BaseHTTPRequestHandler, _stop: threading.Event) -> None:
        prometheus_headers(handler)
        handler.wfile.write(body.encode())

    return answer
