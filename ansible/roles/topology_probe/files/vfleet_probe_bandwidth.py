"""The topology probe's bandwidth measurements: all_reduce across this host's GPUs or one
rank per host (NCCL, or gloo where there is no CUDA), and an iperf3 ring between the hosts.

Part of the collector (vfleet_probe.py): stdlib only, Python 3.8 or newer; the all_reduce
runs in the given venv's interpreter, which has torch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

from vfleet_probe_commands import decode, run
from vfleet_probe_sysfs import interface_with

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
        outputs: list[tuple[int | None, str, str]] = []
        deadline = time.monotonic() + timeout + 60
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                outputs.append((None, decode(out), decode(err) + "\n(timed out)"))
                continue
            outputs.append((proc.returncode, decode(out), decode(err)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        os.unlink(script)
    first = outputs[0][1]
    failed = [(r, e) for r, _, e in outputs if r != 0]
    if not failed:
        lines = first.strip().splitlines()
        try:
            result: dict[str, Any] = json.loads(lines[-1])
            return result
        except (ValueError, IndexError):
            return {"ok": False, "error": f"no result line in rank output: {first[-500:]}"}
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


def intra_allreduce(
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


def inter_allreduce(
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


def measure_iperf3(args: argparse.Namespace, raw: dict[str, Any], peers: list[str]) -> None:
    errors = raw["errors"]
    if not shutil.which("iperf3"):
        errors.append("iperf3 not installed")
        return
    results = iperf3_ring(peers, args.address, args.iperf3_port, args.iperf3_seconds, args.timeout)
    raw["bandwidth"]["iperf3"] = results
    for peer, result in results.items():
        if "error" in result:
            errors.append(f"iperf3 to {peer} failed: {result['error']}")
