"""vfleet's `--kv-transfer-config` (vfleet.render.kv_transfer) against each release's own
`KVTransferConfig`, across the releases where that class changed.

For every release, one process under the vLLM CPU build's python (kv_transfer_runner.py)
builds the release's class from the JSON vfleet renders for a prefill and a decode engine,
both as `KVTransferConfig(**json.loads(...))` and as the CLI parses `--kv-transfer-config`
(`TypeAdapter(KVTransferConfig).validate_json`). Every rendered field must be one the
release has and keeps. The same process shows that the release refuses or lacks what vfleet
leaves out, so the check can fail: `kv_rank` from 0.32, an unknown key wherever the release
forbids extra fields, `kv_load_failure_policy` before 0.13.

Releases other than the installed CPU build come from their wheels' Python sources
(`make oracle-sources`, scripts/fetch-vllm-sources.sh), as for the KV oracle.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support import ci_gate
from support.kv_oracle import oracle
from vfleet.render.kv_transfer import Role, kv_transfer_config, kv_transfer_json

pytestmark = pytest.mark.engine

RUNNER = Path(__file__).resolve().parent / "kv_transfer_runner.py"
ROLES: tuple[Role, ...] = ("prefill", "decode")

# Each side of every boundary vfleet's renderer draws (kv_role required with a connector:
# 0.9.2; the monolithic config.py up to 0.10; kv_load_failure_policy: 0.13; extra="forbid";
# the lease in the extra config: 0.22; the V0 fields gone: 0.32). 0.32.0 is the installed
# CPU build, the others come from scripts/fetch-vllm-sources.sh.
RELEASES = (
    "0.9.2",
    "0.10.1.1",
    "0.11.0",
    "0.13.0",
    "0.17.1",
    "0.20.0",
    "0.22.0",
    "0.26.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
)
# Facts read from the releases, independent of vfleet's catalog. Unknown keys: 0.13.0's
# pydantic dataclass drops them, 0.17.1's `config` decorator sets extra="forbid" (the
# releases in between are not fetched).
FORBIDS_UNKNOWN_FROM = (0, 17)
LOAD_FAILURE_POLICY_FROM = (0, 13)  # absent in 0.12.0, present in 0.13.0
NO_KV_RANK_FROM = (0, 32)

NIXL_REGISTERED = re.compile(r"register_connector\(\s*[\"']NixlConnector[\"']")
FACTORY = Path("distributed/kv_transfer/kv_connector/factory.py")


def release_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split("."))


@dataclass(frozen=True)
class ReleaseRun:
    version: str
    vllm_root: Path  # the release's `vllm` folder
    rendered: dict[str, str]  # role -> the JSON vfleet renders
    answer: dict[str, Any]  # the runner's output

    def result(self, case_id: str) -> dict[str, Any]:
        for result in self.answer["results"]:
            if result["id"] == case_id:
                return result
        raise AssertionError(f"vLLM {self.version}: no result for case {case_id!r}")


def with_field(config: dict[str, object], key: str, value: object) -> str:
    return json.dumps({**config, key: value}, sort_keys=True)


def cases_for(version: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The rendered JSON per role, and every case the runner builds."""
    rendered = {role: kv_transfer_json(version, role) for role in ROLES}
    cases = [{"id": role, "json": text} for role, text in rendered.items()]
    prefill = kv_transfer_config(version, "prefill")
    cases += [
        {"id": "+kv_rank", "json": with_field(prefill, "kv_rank", 0)},
        {"id": "+kv_unknown_field", "json": with_field(prefill, "kv_unknown_field", 1)},
        {
            "id": "+kv_load_failure_policy",
            "json": with_field(prefill, "kv_load_failure_policy", "fail"),
        },
    ]
    return rendered, cases


def vllm_root(version: str) -> Path:
    if oracle.is_installed(version):
        found = list(oracle.vllm_venv().glob("lib/python3*/site-packages/vllm"))
        assert found, f"no vllm package in {oracle.vllm_venv()}"
        return found[0].resolve()
    return (oracle.sources_dir(version) / "vllm").resolve()


def run_release(version: str, cases: list[dict[str, str]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vfleet-kv-transfer-") as tmp:
        # A clean environment, as the KV oracle's: no user VLLM_* settings.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "TMPDIR": tmp,
            "VLLM_CACHE_ROOT": str(Path(tmp) / "vllm"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "OMP_NUM_THREADS": "1",
        }
        if not oracle.is_installed(version):
            env["PYTHONPATH"] = str(oracle.sources_dir(version))
        proc = subprocess.run(
            [str(oracle.vllm_venv() / "bin" / "python"), str(RUNNER)],
            input=json.dumps({"cases": cases}),
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp,
            check=False,
        )
    assert proc.returncode == 0, (
        f"kv_transfer_runner for vLLM {version} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    )
    try:
        answer: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        pytest.fail(
            f"kv_transfer_runner for vLLM {version} printed no JSON ({exc}):\n{proc.stdout}"
        )
    return answer


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> ReleaseRun:
    version: str = request.param
    reason = oracle.unavailable_reason(version)
    ci_gate.require(reason is None, str(reason), "engine tests")
    rendered, cases = cases_for(version)
    answer = run_release(version, cases)
    root = vllm_root(version)
    # A runner that imported another release (the installed build) would prove nothing.
    loaded = Path(answer["module_file"]).resolve()
    assert root in loaded.parents, f"vLLM {version}: KVTransferConfig from {loaded}, not {root}"
    ran = str(answer["vllm_version"])
    assert release_tuple(ran) == release_tuple(version), f"ran vLLM {ran}, not {version}"
    return ReleaseRun(version, root, rendered, answer)


def test_rendered_config_accepted(release: ReleaseRun) -> None:
    """Both roles' JSON builds the release's config, and every field vfleet writes is one the
    release has and holds as written (a release before 0.17 drops an unknown key silently)."""
    fields = set(release.answer["fields"])
    for role, text in release.rendered.items():
        result = release.result(role)
        where = f"vLLM {release.version}, {role} {text}"
        assert result["init_error"] is None, f"{where}: KVTransferConfig(**) {result['init_error']}"
        assert result["cli_error"] is None, f"{where}: --kv-transfer-config {result['cli_error']}"
        written = json.loads(text)
        assert set(written) <= fields, (
            f"{where}: not fields of the release: {set(written) - fields}"
        )
        assert result["held"] == written, f"{where}: the release's config holds {result['held']}"


def test_release_registers_nixl(release: ReleaseRun) -> None:
    factory = release.vllm_root / FACTORY
    assert factory.is_file(), f"vLLM {release.version} has no {factory}"
    assert NIXL_REGISTERED.search(factory.read_text()), (
        f"vLLM {release.version} registers no NixlConnector in {factory}"
    )


def test_release_refuses_what_vfleet_leaves_out(release: ReleaseRun) -> None:
    """What vfleet does not write is refused (or absent) where the release says so."""
    v = release_tuple(release.version)
    fields = set(release.answer["fields"])

    kv_rank = release.result("+kv_rank")
    if v >= NO_KV_RANK_FROM:
        assert "kv_rank" not in fields
        assert kv_rank["init_error"] and "kv_rank" in kv_rank["init_error"], kv_rank
        assert kv_rank["cli_error"] and "kv_rank" in kv_rank["cli_error"], kv_rank
    else:
        assert "kv_rank" in fields and kv_rank["init_error"] is None, kv_rank

    unknown = release.result("+kv_unknown_field")
    if v >= FORBIDS_UNKNOWN_FROM:
        assert unknown["init_error"] and "kv_unknown_field" in unknown["init_error"], unknown
        assert unknown["cli_error"] and "kv_unknown_field" in unknown["cli_error"], unknown
    else:
        # Accepted and dropped: only the field list can tell vfleet what such a release has.
        assert unknown["init_error"] is None, unknown
        assert "kv_unknown_field" not in unknown["held"], unknown

    policy = release.result("+kv_load_failure_policy")
    if v < LOAD_FAILURE_POLICY_FROM:
        assert "kv_load_failure_policy" not in fields
        refused = policy["init_error"] is not None
        assert refused or "kv_load_failure_policy" not in policy["held"], policy
    else:
        assert "kv_load_failure_policy" in fields
        assert policy["init_error"] is None, policy
