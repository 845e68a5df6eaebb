"""endpoints.json: every engine `vfleet render` wrote, with its API URL and its hosts.

The load test role and `vfleet doctor --endpoints` read it back; a file edited by hand (or
cut short) is checked here first, so a wrong URL is one line naming the engine instead of a
connection error later.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from vfleet.inputs.files import load_json
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.validate import validate
from vfleet.inputs.values import Address, Label, Port, check_address


def check_url(value: str) -> str:
    """An http(s) URL whose host is an IP address or a DNS name."""
    scheme, sep, rest = value.partition("://")
    if scheme not in ("http", "https") or not sep:
        raise ValueError("must be an http:// or https:// URL (e.g. http://10.0.0.11:8000/v1)")
    hostport = rest.split("/", 1)[0]
    host = hostport.rsplit(":", 1)[0] if hostport.count(":") == 1 else hostport
    check_address(host.strip("[]"))
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        raise ValueError("must not contain spaces or control characters")
    return value


Url = Annotated[str, AfterValidator(check_url)]


class Endpoint(StrictModel):
    """One engine's API, as `vfleet render` placed it."""

    engine: Label
    """engine id (e.g. engine-0)"""
    mode: Literal["single", "mp", "ray", "dp"]
    """how the engine spans its hosts (single, mp, ray or dp)"""
    host: Label
    """the head host's inventory name (e.g. gpu-01)"""
    address: Address | None = None
    """the head host's address (e.g. 10.0.0.11)"""
    port: Port
    """the API port (e.g. 8000)"""
    url: Url
    """the OpenAI API base URL (e.g. http://10.0.0.11:8000/v1)"""
    health: Url
    """the health URL (e.g. http://10.0.0.11:8000/health)"""
    model: str = Field(min_length=1, max_length=512)
    """the served model name (e.g. meta-llama/Llama-3.1-8B-Instruct)"""
    hosts: list[Label] = Field(min_length=1)
    """every host the engine runs on, head first (e.g. [gpu-01, gpu-02])"""
    pool: Literal["prefill", "decode"] | None = None
    """the engine's pool in a disaggregated plan (prefill or decode); absent otherwise"""

    @property
    def base_url(self) -> str:
        """The server's root, where /metrics lives (the URL without its /v1)."""
        return self.url.rstrip("/").removesuffix("/v1")


class Router(StrictModel):
    """The P/D router in front of a disaggregated plan's pools."""

    host: Label
    """the router's host (e.g. gpu-01)"""
    url: Url
    """the OpenAI API base URL clients use (e.g. http://10.0.0.11:9000/v1)"""
    health: Url
    """the router's health URL (e.g. http://10.0.0.11:9000/health)"""


class Endpoints(StrictModel):
    """The whole endpoints.json."""

    model: str | None = None
    """the plan's model id (e.g. meta-llama/Llama-3.1-8B-Instruct)"""
    endpoints: list[Endpoint] = Field(min_length=1, max_length=4096)
    """every engine, one entry each"""
    router: Router | None = None
    """the P/D router of a disaggregated plan"""


def pool_urls(endpoints: Iterable[Endpoint]) -> dict[str, list[str]]:
    """Each pool's engines' server roots, by pool name: only for a disaggregated deployment
    (a prefill and a decode pool both there); empty for any other set of engines."""
    pools: dict[str, list[str]] = {}
    for endpoint in endpoints:
        if endpoint.pool is not None:
            pools.setdefault(endpoint.pool, []).append(endpoint.base_url)
    return pools if set(pools) == {"prefill", "decode"} else {}


def load_endpoints(path: Path) -> Endpoints:
    """Read and check an endpoints.json (exit 2 with one line when it is not one)."""
    return validate(Endpoints, load_json(path, "endpoints file"))
