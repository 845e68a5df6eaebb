"""A testbed's record on disk: its hosts, addresses, namespaces and the nspawn process of each.

The record lives in `$VFLEET_TESTBED_RUN/<name>/state.json` (default `/run/vfleet-testbed/`),
beside the files `testbed up` writes for tools (`access.py`). It is rewritten whole (a
temporary file, then a rename), so a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_NAME = "tb"


def run_root() -> Path:
    return Path(os.environ.get("VFLEET_TESTBED_RUN", "/run/vfleet-testbed"))


def state_dir(name: str) -> Path:
    return run_root() / name


@dataclass
class Host:
    name: str
    address: str
    netns: str
    machine: str
    log: str
    profile: str = ""  # the GPU host it replays; "" in records written before hosts had one
    pid: int | None = None
    start_time: int | None = None  # /proc/<pid>/stat field 22: guards against PID reuse
    leader_pid: int | None = None  # the container's PID 1 as this machine sees it
    system_state: str | None = None


@dataclass
class Testbed:
    name: str
    profile: str  # as given to `testbed up`: one profile, or one per host, comma-separated
    shape: str
    rate_mbit: int | None
    state_dir: str
    image: str
    key: str
    hub_netns: str
    controller_netns: str
    controller_address: str
    inventory: str
    ssh_config: str
    proxy: str
    hosts: list[Host] = field(default_factory=list)
    bind_ro: list[str] = field(default_factory=list)  # "SRC:DST", read-only in every host
    created_at: str = ""
    up_seconds: float | None = None
    image_build_seconds: float | None = None

    def host_profile(self, host: Host) -> str:
        return host.profile or self.profile

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["hosts"] = [dict(h.__dict__) for h in self.hosts]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Testbed:
        hosts = [Host(**h) for h in data.get("hosts", [])]
        return cls(**{**data, "hosts": hosts})

    def save(self) -> None:
        path = Path(self.state_dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        tmp.replace(path)


def load(name: str) -> Testbed | None:
    try:
        return Testbed.from_json(json.loads((state_dir(name) / "state.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None
