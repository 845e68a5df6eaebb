"""`vfleet render`'s flags and options as checked models, and the rules for what operators
add.

Everything here ends up in launch.sh, vllm.env or a systemd unit. The model narrows each
flag to what those formats carry (no control characters anywhere, absolute paths, ports
that stay ports for every engine); `check_extra_args` and `check_env` keep `--extra-arg`
and `--env` from setting what vfleet itself decides (the exposure model, the parallel
layout, the per-engine network environment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, ValidationInfo, field_validator

from vfleet.catalog.flag_registry import FlagSet, _registry
from vfleet.documents import flag_types as flags
from vfleet.documents.flag_types import FIXED, Derived, FilePath, OneOf, Rule
from vfleet.errors import UserError
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.values import AbsPath, Label, check_env_key, check_unit_path

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")  # a negative value, not a flag
MODELS_DIR = "/srv/models"  # where a model's folder sits on the hosts unless told
VLLM_BIN = "/opt/vfleet/vllm/bin/vllm"  # the vllm role's venv (vllm_venv) + /bin/vllm
ROUTER_BIN = "/opt/vfleet/router/bin/vllm-router"  # the vllm_router role's vllm_router_venv


def model_folder(model: str) -> str:
    """A model's folder on the hosts unless told: MODELS_DIR/<the id's last part>."""
    return f"{MODELS_DIR}/{model.rstrip('/').split('/')[-1]}"


def check_text(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters (a newline, a tab, ...)")
    return value


def check_env_item(value: str) -> str:
    key, sep, rest = value.partition("=")
    if not sep:
        raise ValueError("must be KEY=VALUE (e.g. NCCL_DEBUG=INFO)")
    check_env_key(key)
    if "\0" in rest or _CONTROL.search(rest):
        raise ValueError("value must not contain control characters (a newline, a tab, ...)")
    return value


Text = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(check_text)]
ModelName = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(check_text)]
UnitPath = Annotated[AbsPath, AfterValidator(check_unit_path)]
EnvItem = Annotated[str, Field(max_length=8192), AfterValidator(check_env_item)]
ApiPort = Annotated[int, Rule(flags.count(1, 65535))]


@dataclass(frozen=True)
class RayPorts:
    """Ray's listening ports besides the GCS (`RenderOptions.ray_port`). Ray picks most of
    them at random unless told; pinned here so that the firewall can name them, and kept
    below the kernel's ephemeral range (32768-60999 by default) so that no socket bound to
    port 0 takes one first (Ray's own default agent port, 52365, sits inside it)."""

    node_manager: int = 6380
    object_manager: int = 6381
    runtime_env_agent: int = 6382
    dashboard_agent_grpc: int = 6383
    metrics_export: int = 6384
    dashboard_agent_listen: int = 6385
    min_worker: int = 10002
    max_worker: int = 10999
    client_server: int = 10001  # head only; never opened by the firewall
    dashboard: int = 8265  # head only, on 127.0.0.1


class RenderOptions(StrictModel):
    """What a render writes into each host's files besides the plan, keyed by the flags of
    `vfleet render`: its parser is generated from these fields (vfleet.cli.from_model), and
    the deploy's group_vars map onto them (vfleet.documents.deploy.RENDER_FIELDS). Code builds
    one by field name; vfleet.render.request.render_options checks one given by flag."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)

    model_path: Annotated[AbsPath, Derived(f"{MODELS_DIR}/<name>")] = Field(alias="--model-path")
    """model folder on the hosts (e.g. /srv/models/Llama-3.1-8B-Instruct)"""
    served_model_name: Annotated[ModelName, Derived("the model id")] = Field(
        alias="--served-model-name"
    )
    """API model name without control characters (e.g. meta-llama/Llama-3.1-8B-Instruct)"""
    vllm_bin: AbsPath = Field(VLLM_BIN, alias="--vllm-bin")
    """vllm executable on the hosts (e.g. /opt/vfleet/vllm/bin/vllm)"""
    router_bin: AbsPath = Field(ROUTER_BIN, alias="--router-bin")
    """vllm-router executable on the P/D router's host (e.g. /opt/vfleet/router/bin/vllm-router)"""
    router_host: Label | None = Field(None, alias="--router-host")
    """cluster host that runs the P/D router (default: the plan's, its first prefill host)"""
    port: ApiPort = Field(8000, alias="--port")
    """first API port on each host, 1-65535 (e.g. 8000)"""
    backend: Literal["auto", "mp", "ray"] = Field("auto", alias="--backend")
    """multi-node TP/PP backend: auto (mp from vLLM 0.11.1, else ray), mp or ray"""
    api_key_file: AbsPath | None = Field(None, alias="--api-key-file")
    """API key file on the hosts (e.g. /etc/vfleet/secrets/api-key)"""
    install_dir: UnitPath = Field("/etc/vfleet", alias="--install-dir")
    """where the units expect the files, a plain absolute path (e.g. /etc/vfleet)"""
    # Lax: a list (from the command line or YAML) becomes the tuple a frozen model keeps.
    extra_args: tuple[Text, ...] = Field((), alias="--extra-arg", strict=False)
    """extra vllm serve arguments, one flag or value each (e.g. --enforce-eager)"""
    env: tuple[EnvItem, ...] = Field((), alias="--env", strict=False)
    """extra environment as KEY=VALUE (e.g. NCCL_DEBUG=INFO)"""
    draft_model_path: Annotated[AbsPath | None, Derived(f"{MODELS_DIR}/<draft name>")] = Field(
        None, alias="--draft-model-path"
    )
    """EAGLE draft folder on the hosts (e.g. /srv/models/EAGLE3-LLaMA3.1-8B)"""
    # The plan's file name, for the files' provenance: `vfleet render --plan`'s, no flag.
    plan_name: Annotated[Text, FIXED] = Field("plan.json", alias="--plan")
    """plan file name without control characters (e.g. plan.json)"""

    # What vfleet fixes for every render (no flag): the bootstrap ports and the service.
    master_port: Annotated[int, FIXED] = 29501
    dp_rpc_port: Annotated[int, FIXED] = 13345
    ray_port: Annotated[int, FIXED] = 6379
    ray_ports: Annotated[RayPorts, FIXED] = RayPorts()
    all2all_backend: Annotated[str, FIXED] = "allgather_reducescatter"
    service_user: Annotated[str, FIXED] = "vllm"
    # The service user's home: the only place the hardened units may write (caches).
    service_home: Annotated[str, FIXED] = "/var/lib/vllm"

    @field_validator("port")
    @classmethod
    def _every_engine_has_a_port(cls, value: int, info: ValidationInfo) -> int:
        # Engines headed on one host take port, port+1, ... (render assigns them so).
        engines = int((info.context or {}).get("engines_per_host", 1))
        if value + engines - 1 > 65535:
            raise ValueError(
                f"the last of the {engines} engines on one host would get port "
                f"{value + engines - 1}, past 65535: choose a lower --port"
            )
        return value

    @staticmethod
    def plan_defaults(model: str) -> dict[str, str]:
        """The defaults that come from the plan's model, by flag: its folder under
        MODELS_DIR and its id as the API name."""
        return {"--model-path": model_folder(model), "--served-model-name": model}

    @property
    def ray_bin(self) -> str:
        """`ray`, installed beside vllm in the same venv."""
        return str(PurePosixPath(self.vllm_bin).with_name("ray"))

    @property
    def extra_env(self) -> tuple[tuple[str, str], ...]:
        return tuple((key, value) for key, _, value in (i.partition("=") for i in self.env))


class RenderFlags(StrictModel):
    """`vfleet render`'s inputs and output; the values it writes into the files are
    RenderOptions, the speculative choice vfleet.documents.requests.SpeculativeOptions."""

    plan: FilePath
    """plan JSON from vfleet plan"""
    facts: Annotated[FilePath | None, OneOf("source")] = None
    """probe facts directory"""
    cluster: Annotated[FilePath | None, OneOf("source")] = None
    """cluster spec YAML"""
    out: FilePath
    """e.g. artifacts/<env>/launch"""
    target: Literal["hosts", "lws"] = "hosts"
    """hosts: launch scripts and systemd units per host; lws: Kubernetes LeaderWorkerSet
    manifests (the flags from --image on)"""
    allow_partial_facts: bool = False
    """render even if a host's probe failed or measured nothing"""

    @property
    def source(self) -> Path:
        """The facts folder or the cluster spec, whichever was given (argparse lets one)."""
        source = self.facts or self.cluster
        assert source is not None, "argparse requires --facts or --cluster"
        return source


# Flags the plan decides, and where to change each instead.
_LAYOUT = "the plan's layout: re-plan with `vfleet plan --layout ...`"
PLAN_FLAGS: Mapping[str, str] = {
    "--tensor-parallel-size": _LAYOUT,
    "--pipeline-parallel-size": _LAYOUT,
    "--data-parallel-size": _LAYOUT,
    "--enable-expert-parallel": _LAYOUT,
    "--decode-context-parallel-size": _LAYOUT,
    "--gpu-memory-utilization": "change it with `vfleet plan --gpu-memory-utilization`",
    "--kv-cache-dtype": "change it with `vfleet plan --kv-cache-dtype`",
    "--max-num-seqs": "change max_num_seqs in the plan (vfleet_plan_overrides)",
    "--max-num-batched-tokens": "change max_num_batched_tokens in the plan (vfleet_plan_overrides)",
    "--max-model-len": "change max_model_len in the plan (vfleet_plan_overrides)",
    "--block-size": "change block_size in the plan (vfleet_plan_overrides)",
    "--enable-chunked-prefill": "change enable_chunked_prefill in the plan",
    "--speculative-config": "use --speculative-method on `vfleet plan` or `vfleet render`",
}
# Flags vfleet sets per engine from the cluster and its own options.
VFLEET_FLAGS: Mapping[str, str] = {
    "--host": "the API binds to the host's private address (the firewall assumes it)",
    "--port": "use `vfleet render --port`",
    "--api-key": "use --api-key-file (a key on the command line shows in `ps`)",
    "--model": "use --model-path",
    "--served-model-name": "use --served-model-name",
    "--config": "a config file can set what vfleet owns: pass the flags themselves",
    "--headless": "vfleet makes followers headless",
    "--nnodes": "vfleet sets the multi-node layout",
    "--node-rank": "vfleet sets the multi-node layout",
    "--master-addr": "vfleet sets the multi-node layout",
    "--master-port": "vfleet sets the multi-node layout",
    "--distributed-executor-backend": "use `vfleet render --backend`",
    "--data-parallel-size-local": "vfleet sets the data parallel layout",
    "--data-parallel-start-rank": "vfleet sets the data parallel layout",
    "--data-parallel-rank": "vfleet sets the data parallel layout",
    "--data-parallel-address": "vfleet sets the data parallel layout",
    "--data-parallel-rpc-port": "vfleet sets the data parallel layout",
}


@cache
def _spellings() -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Every spelling any recorded release accepts -> its canonical flag, and each canonical
    flag's record (probed flag sets list spellings only)."""
    canonical: dict[str, str] = {}
    info: dict[str, dict[str, Any]] = {}
    for entry in _registry()["versions"].values():
        canonical.update(entry.get("option_index") or {})
        for flag, record in (entry.get("flags") or {}).items():
            info.setdefault(flag, record)
            for alias in (
                *(record.get("aliases") or []),
                *(record.get("negative") or []),
                *(record.get("hidden_negative") or []),
            ):
                canonical.setdefault(alias, flag)
    return canonical, info


def canonical_flag(name: str) -> str:
    if name.startswith("--"):
        name = name.replace("_", "-")  # vLLM's parser reads --max_model_len as --max-model-len
    return _spellings()[0].get(name, name)


def _split(token: str, flags: FlagSet) -> tuple[str, bool]:
    """(flag name, value attached) for one token that starts with '-'."""
    name, eq, _ = token.partition("=")
    if eq:
        return name, True
    if not token.startswith("--") and len(token) > 2 and not flags.has(token):
        for cut in range(len(token) - 1, 1, -1):  # -O3: a short option with its value
            if flags.has(token[:cut]):
                return token[:cut], True
    return token, False


def check_extra_args(
    args: Iterable[str], flags: FlagSet, release: str, rendered: Iterable[str] = ()
) -> None:
    """Refuse an --extra-arg the release lacks, or one that sets what vfleet owns
    (`rendered`: the flags vfleet already wrote for the engine)."""
    owned = {canonical_flag(f) for f in rendered}
    expecting = False  # the previous flag takes a value that has not come yet
    many = False  # the previous flag takes several values (nargs '+')
    for token in args:
        what = f"--extra-arg {token[:60]!r}"
        if _CONTROL.search(token):
            raise UserError(f"{what} contains a control character: remove it")
        if token == "--":
            raise UserError(f"{what}: vLLM would read what follows as the model: drop it")
        if token.startswith("-") and not _NUMBER.fullmatch(token):
            name, attached = _split(token, flags)
            if not flags.has(name):
                raise UserError(
                    f"{what}: vLLM {release} has no {name} (flag set {flags.summary}): check "
                    "the spelling in that release's `vllm serve --help=all`"
                )
            canon = canonical_flag(name)
            why = PLAN_FLAGS.get(canon)
            if why:
                raise UserError(f"{what}: the plan sets {canon}; {why}")
            why = VFLEET_FLAGS.get(canon)
            if why or canon in owned:
                raise UserError(
                    f"{what}: vfleet sets {canon} for every engine; "
                    f"{why or 'change the plan or the render options instead'}"
                )
            record = _spellings()[1].get(canon, {})
            takes = record.get("takes_value", True) and not attached
            expecting = takes
            many = takes and record.get("nargs") in ("+", "*")
            continue
        if not expecting and not many:
            raise UserError(
                f"{what} is not a flag or the value of the flag before it: vLLM would read it "
                "as the model, which vfleet sets (--model-path)"
            )
        expecting = False


# Variables bash reads before launch.sh's first line runs.
BASH_ENV_NAMES = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS")


def check_env(pairs: Iterable[tuple[str, str]], owned: Iterable[str]) -> None:
    """Refuse an --env that overrides a variable vfleet sets (`owned`) or that bash reads."""
    owned = set(owned)
    for key, _ in pairs:
        if key in owned:
            raise UserError(
                f"--env {key}=...: vfleet sets {key} for every engine from the cluster and the "
                "plan: change the cluster spec or the render options instead"
            )
        if key in BASH_ENV_NAMES:
            raise UserError(
                f"--env {key}=...: bash reads {key} before launch.sh runs: leave it unset"
            )
