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


# One engine's page in a prefill/decode pair, vLLM 0.32's series and labels.
PD_ENGINE = """\
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.3
vllm:num_preemptions_total{{engine="0",model_name="m"}} 0
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} 100
vllm:prompt_tokens_total{{engine="0",model_name="m"}} 102400
vllm:generation_tokens_total{{engine="0",model_name="m"}} 25600
vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_compute"}} {local}
vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="local_cache_hit"}} 0
vllm:prompt_tokens_by_source_total{{model_name="m",source="external_kv_transfer"}} {pulled}
vllm:nixl_num_failed_transfers_total{{engine="0",model_name="m"}} {failed}
vllm:nixl_num_kv_expired_reqs_total{{engine="0",model_name="m"}} {expired}
"""


def pd_engine_text(
    running: int = 8, waiting: int = 0, local: int = 0, pulled: int = 0, failed: int = 0,
    expired: int = 0,
) -> str:  # fmt: skip
    return PD_ENGINE.format(
        running=running, waiting=waiting, local=local, pulled=pulled, failed=failed,
        expired=expired,
    )  # fmt: skip
