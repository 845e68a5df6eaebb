"""Reading engines' /metrics over HTTP, each fetch bounded in time and size, and reducing
each group of engines' scrapes to one observation: used by `vfleet doctor` and by the deploy
report, which reads each prefill/decode pool after the load test."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Protocol

from vfleet.errors import UserError
from vfleet.observe import doctor, metrics
from vfleet.observe.doctor import Observation

# One endpoint's /metrics: a vLLM server's is tens of KiB and comes in well under a second.
FETCH_DEADLINE_S = 15.0
FETCH_MAX_BYTES = 16 << 20
_CHUNK_BYTES = 64 << 10


def observe_groups(
    groups: dict[str, list[str]], served: str | None, watch: float
) -> dict[str, Observation]:
    """Scrape every group's endpoints once, or every step of a --watch window; reduce each
    group's scrapes to one observation."""

    def scrape(urls: list[str]) -> tuple[float, metrics.Snapshot]:
        texts = [fetch_metrics(e) for e in urls]
        return time.monotonic(), metrics.parse(texts, [e.rstrip("/") for e in urls], served)

    if not groups:
        return {}
    samples = {name: [scrape(urls)] for name, urls in groups.items()}
    if watch > 0:
        step = max(0.5, watch / 10)
        deadline = time.monotonic() + watch
        while time.monotonic() < deadline:
            time.sleep(min(step, max(0.0, deadline - time.monotonic())))
            for name, urls in groups.items():
                samples[name].append(scrape(urls))
    return {name: doctor.observe(taken) for name, taken in samples.items()}


def fetch_metrics(endpoint: str) -> str:
    """The text of an engine's /metrics, or a UserError saying what to check."""
    url = endpoint.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--endpoint {endpoint!r} is not a URL: write it like http://HOST:8000")
    text = _fetch_in_time(f"{url}/metrics").decode("utf-8", "replace")
    if not text.strip():
        raise UserError(
            f"{url}/metrics is empty: the server is not exporting metrics yet; "
            "retry once it has started"
        )
    return text


def _fetch_in_time(url: str) -> bytes:
    """The body at `url`, or a UserError once FETCH_DEADLINE_S have passed. A socket timeout
    bounds each read, not the fetch (a server sending a byte a second never trips it), and
    nothing bounds a slow name lookup: the fetch runs in a worker thread that the caller
    stops waiting for at the deadline; the worker ends itself at its next chunk."""
    deadline = time.monotonic() + FETCH_DEADLINE_S
    outcome: list[bytes | BaseException] = []
    worker = threading.Thread(
        target=_fetch_into, args=(url, deadline, outcome), name=f"fetch {url}", daemon=True
    )
    worker.start()
    worker.join(FETCH_DEADLINE_S)
    if not outcome:
        raise _too_slow(url)
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _fetch_into(url: str, deadline: float, outcome: list[bytes | BaseException]) -> None:
    try:
        outcome.append(_fetch_capped(url, deadline))
    except BaseException as exc:  # handed to the waiting thread, which raises it
        outcome.append(exc)


def _fetch_capped(url: str, deadline: float) -> bytes:
    try:
        left = max(0.001, deadline - time.monotonic())  # 0 would mean non-blocking
        with urllib.request.urlopen(url, timeout=left) as reply:
            return _read_body(reply, url, deadline)
    except urllib.error.HTTPError as exc:
        raise UserError(
            f"{url} answered HTTP {exc.code}: is this a vLLM API "
            "server? point --endpoint at its base URL"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a bad URL
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"cannot reach {url} ({reason}): check the address, the port "
            "and that the vLLM service is running"
        ) from None


class _Body(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


def _read_body(reply: _Body, url: str, deadline: float) -> bytes:
    """The reply's body in chunks (read1: one socket read each, so a trickle returns),
    refused past FETCH_MAX_BYTES or the deadline."""
    chunks: list[bytes] = []
    size = 0
    while chunk := reply.read1(_CHUNK_BYTES):
        size += len(chunk)
        if size > FETCH_MAX_BYTES:
            raise UserError(
                f"{url} sent more than {FETCH_MAX_BYTES / 2**20:g} MiB, far more than a vLLM "
                "server's metrics: point --endpoint at a vLLM API server (http://HOST:PORT)"
            )
        if time.monotonic() > deadline:
            raise _too_slow(url)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_slow(url: str) -> UserError:
    return UserError(
        f"{url} did not finish sending in {FETCH_DEADLINE_S:g} s: check that it is a vLLM "
        "API server and that the host and network are not overloaded, then retry"
    )


def reduce_pools(
    groups: dict[str, list[str]], pages: dict[str, str], served: str | None
) -> tuple[dict[str, Observation], str]:
    """Each pool's engines' /metrics pages (pool -> server roots, as
    vfleet.documents.endpoints.pool_urls groups them; pages by server root, read where the
    load test ran) reduced to one observation a pool; a note instead where a page is
    missing or is not a vLLM engine's, so that the report it feeds still gets written."""
    if not groups:
        return {}, ""
    missing = [url for urls in groups.values() for url in urls if url not in pages]
    if missing:
        return {}, f"The pools' engines could not be read after the load test: {', '.join(missing)}"
    now = time.monotonic()
    observed = {}
    try:
        for pool, urls in groups.items():
            snapshot = metrics.parse([pages[url] for url in urls], urls, served)
            observed[pool] = doctor.observe([(now, snapshot)])
    except UserError as exc:
        return {}, f"The pools' engines' metrics could not be read: {exc}"
    return observed, ""
