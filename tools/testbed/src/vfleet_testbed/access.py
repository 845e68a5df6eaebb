"""The files `testbed up` writes for the hosts and for the tools that reach them: the GPU
fixture every host sees, and the ssh ProxyCommand, ssh_config and Ansible inventory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from vfleet_testbed import base
from vfleet_testbed.errors import TestbedError
from vfleet_testbed.profiles import PROFILES, fixtures_root
from vfleet_testbed.state import Testbed

SSH_OPTIONS = (
    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes "
    "-o LogLevel=ERROR -o ControlMaster=no -o ControlPath=none"
)


def stage_gpu(directory: Path, profile: str) -> None:
    """The profile's fixture plus the stand-in, as the hosts will see it at GPU_MOUNT."""
    source = fixtures_root()
    fixture = source / PROFILES[profile].fixture
    if not fixture.is_dir() or not (source / base.STANDIN).is_file():
        raise TestbedError(
            f"GPU fixtures not found at {source}; set VFLEET_GPU_HOSTS to tests/data/gpu-hosts"
        )
    shutil.copytree(fixture, directory)
    shutil.copy2(source / base.STANDIN, directory / base.STANDIN)
    (directory / base.STANDIN).chmod(0o755)
    p = PROFILES[profile]
    (directory / "profile.json").write_text(
        json.dumps({"profile": p.name, "fixture": p.fixture, "gpu": p.gpu, "gpus": p.gpus}) + "\n"
    )


def write_access(tb: Testbed) -> None:
    """proxy, ssh_config and inventory.yml: everything a tool needs to reach the hosts."""
    proxy = Path(tb.proxy)
    proxy.write_text(
        "#!/bin/sh\n"
        f"# ssh ProxyCommand for testbed {tb.name}: connect from its controller namespace,\n"
        "# the only one with a way onto the hosts' bridge. Usage: proxy HOST PORT\n"
        f'exec ip netns exec {tb.controller_netns} nc -q0 "$1" "$2"\n'
    )
    proxy.chmod(0o755)
    lines = [f"# Written by `testbed up` for testbed {tb.name}; use: ssh -F {tb.ssh_config} h1"]
    for h in tb.hosts:
        lines += [f"Host {h.name}", f"    HostName {h.address}"]
    lines += [
        "Host *",
        "    User root",
        f"    IdentityFile {tb.key}",
        "    IdentitiesOnly yes",
        "    BatchMode yes",
        "    StrictHostKeyChecking no",
        "    UserKnownHostsFile /dev/null",
        "    LogLevel ERROR",
        "    ControlMaster no",
        "    ControlPath none",
        "    ConnectTimeout 10",
        f"    ProxyCommand {tb.proxy} %h %p",
        "",
    ]
    Path(tb.ssh_config).write_text("\n".join(lines))
    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": tb.key,
                "ansible_ssh_common_args": f'{SSH_OPTIONS} -o ProxyCommand="{tb.proxy} %h %p"',
                "ansible_python_interpreter": "/usr/bin/python3",
                "testbed_name": tb.name,
                "testbed_profile": tb.profile,
                "testbed_shape": tb.shape,
                "testbed_gpu_fixture": base.GPU_MOUNT,
            },
            "children": {
                "gpu_hosts": {
                    "hosts": {
                        h.name: {"ansible_host": h.address, "testbed_profile": tb.host_profile(h)}
                        for h in tb.hosts
                    }
                }
            },
        }
    }
    header = (
        f"# Written by `testbed up` for testbed {tb.name} (profile {tb.profile}, "
        f"shape {tb.shape}); removed by `testbed down --name {tb.name}`.\n"
    )
    Path(tb.inventory).write_text(header + yaml.safe_dump(inventory, sort_keys=False))
