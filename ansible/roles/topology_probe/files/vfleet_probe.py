#!/usr/bin/env python3
"""vfleet topology probe: record what one GPU host is made of, as raw outputs in one JSON.

Stdlib only, Python 3.8 or newer, so it runs on a bare host. It parses nothing it does not
have to: the controller (vfleet.probe) parses the outputs, where they are tested against
real captures. Schema "vfleet.probe/1":

    host, address, collected_at, collector, probe_failed, errors
    commands   {name: {argv, rc, stdout, stderr, error, seconds}} for nvidia_smi_query
               (-q -x), nvidia_smi_topo (topo -m), nvidia_smi_nvlink (nvlink -s), lscpu,
               numactl (-H), fabricmanager (systemctl is-active), kernel_xid
               (journalctl -k -g 'NVRM: Xid', or grep over --kernel-log), vllm_help
    sysfs      infiniband: [{name, node_type, fw_ver, hca_type, board_id, netdevs,
                             ports: [{port, state, phys_state, rate, link_layer, lid,
                                      gids: [{index, gid, type, ndev}]}]}]
               net: [{name, operstate, speed, mtu, address, type, virtual, driver, ipv4}]
               pci_nvidia: [{address, class, device, numa_node}]
               pci_nics: [{address, vendor, device, class, netdevs, rdma, current_link_width,
                           max_link_width, current_link_speed, max_link_speed}]
    files      {"/proc/net/route": text, "/proc/meminfo": head}
    route_to   {target, source}: the source address the kernel picks towards the cluster
    python     {executable, vllm_version, vllm_dist, torch_version, cuda_available,
                nccl_version} read inside the given venv
    bandwidth  {intra_allreduce, inter_allreduce: {backend, world_size, ok, rows: [{bytes,
                seconds, algbw_GBps, busbw_GBps}], ...}, iperf3: {peer: {...}}}

Every step records its own failure and the script still writes the file and exits 0, so
the controller can say what went wrong on which host; nvidia-smi missing or failing, and a
requested measurement failing, set probe_failed.

The role copies this file and its vfleet_probe_*.py siblings (the commands, the sysfs reads,
the bandwidth measurements) into one directory on the host and runs this one.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import tempfile
from typing import Any

# The siblings are imported from this script's directory on the host; no __pycache__ may be
# left there, since the role's clean-up removes only the files it copied.
sys.dont_write_bytecode = True

from vfleet_probe_bandwidth import (  # noqa: E402
    inter_allreduce,
    intra_allreduce,
    measure_iperf3,
)
from vfleet_probe_commands import gpu_commands, host_commands, python_and_flags  # noqa: E402
from vfleet_probe_sysfs import (  # noqa: E402
    read,
    resolve,
    route_source,
    sysfs_infiniband,
    sysfs_net,
    sysfs_pci_nics,
    sysfs_pci_nvidia,
)

SCHEMA = "vfleet.probe/1"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="-", help="JSON file to write ('-': stdout)")
    p.add_argument("--host", help="name to record (default: the hostname)")
    p.add_argument("--address", help="the address peers reach this host at")
    p.add_argument("--nvidia-smi", help="nvidia-smi to run (default: the one on PATH)")
    p.add_argument(
        "--kernel-log", help="read the driver's Xid lines from this file, not the journal"
    )
    p.add_argument("--python", help="a venv python to read vLLM/torch/NCCL versions from")
    p.add_argument("--vllm-flags", action="store_true", help="record `vllm serve --help=all`")
    p.add_argument("--peers", default="", help="comma list of every host's address, in order")
    p.add_argument("--route-to", help="address to find the cluster route towards")
    p.add_argument("--intra-allreduce", action="store_true", help="all_reduce across local GPUs")
    p.add_argument("--intra-ranks", type=int, help="ranks for it (default: GPUs seen)")
    p.add_argument("--inter-allreduce", action="store_true", help="all_reduce, 1 rank per peer")
    p.add_argument("--iperf3", action="store_true", help="iperf3 to the next peer in --peers")
    p.add_argument("--master-port", type=int, default=29511)
    p.add_argument("--iperf3-port", type=int, default=5201)
    p.add_argument("--iperf3-seconds", type=int, default=5)
    p.add_argument("--sizes-mib", default="1,16,64,256")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--backend", choices=("auto", "gloo"), default="auto")
    p.add_argument("--timeout", type=float, default=300.0, help="per measurement, seconds")
    return p


def collect(args: argparse.Namespace) -> dict[str, Any]:
    # Inventories may name hosts; sockets and the NIC records need addresses.
    peers = [resolve(p.strip()) for p in args.peers.split(",") if p.strip()]
    args.address = resolve(args.address) if args.address else None
    raw: dict[str, Any] = {
        "schema": SCHEMA,
        "host": args.host or socket.gethostname(),
        "address": args.address,
        # timezone.utc, not datetime.UTC: hosts may run Python 3.8
        "collected_at": datetime.datetime.now(datetime.timezone.utc).isoformat(  # noqa: UP017
            timespec="seconds"
        ),
        "collector": {"argv": sys.argv, "python": sys.version.split()[0]},
        "probe_failed": False,
        "errors": [],
        "commands": {},
        "sysfs": {},
        "files": {},
        "route_to": None,
        "python": None,
        "bandwidth": {"intra_allreduce": None, "inter_allreduce": None, "iperf3": {}},
    }
    gpu_commands(args, raw["commands"], raw["errors"])
    host_commands(raw["commands"], args.kernel_log)
    nets = sysfs_net()
    raw["sysfs"] = {
        "infiniband": sysfs_infiniband(),
        "net": nets,
        "pci_nvidia": sysfs_pci_nvidia(),
        "pci_nics": sysfs_pci_nics(),
    }
    raw["files"] = {
        "/proc/net/route": read("/proc/net/route"),
        "/proc/meminfo": "\n".join((read("/proc/meminfo") or "").splitlines()[:5]),
    }
    target = args.route_to or next((p for p in peers if p != args.address), None)
    if target:
        raw["route_to"] = {"target": target, "source": route_source(target)}
    python_and_flags(args, raw)

    base_env = {"VFLEET_SIZES_MIB": args.sizes_mib, "VFLEET_ITERS": str(args.iters)}
    if args.backend == "gloo":
        base_env["VFLEET_BACKEND"] = "gloo"
    if args.intra_allreduce:
        intra_allreduce(args, raw, base_env)
    if (args.inter_allreduce or args.iperf3) and (not args.address or args.address not in peers):
        raw["errors"].append("inter-node measurements need --address listed in --peers")
    else:
        if args.inter_allreduce:
            inter_allreduce(args, raw, base_env, peers, nets)
        if args.iperf3 and len(peers) > 1:
            measure_iperf3(args, raw, peers)
    raw["probe_failed"] = bool(raw["errors"])
    return raw


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    raw = collect(args)
    text = json.dumps(raw, indent=1, sort_keys=True) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    directory = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".probe-")
    with os.fdopen(fd, "w") as fh:  # written whole, then renamed: never a half file
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
