"""`vfleet render`'s options as one checked model, and the rules for what operators add.

Everything here ends up in launch.sh, vllm.env or a systemd unit. The model narrows each
flag to what those formats carry (no control characters anywhere, absolute paths, ports
that stay ports for every engine); `check_extra_args` and `check_env` keep `--extra-arg`
and `--env` from setting what vfleet itself decides (the exposure model, the parallel
layout, the per-engine network environment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from vfleet.catalog.flags import FlagSet, _registry
from vfleet.errors import UserError
from vfleet.inputs.base import StrictModel
from vfleet.inputs.values import AbsPath, Port, check_env_key, check_unit_path

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")  # a negative value, not a flag


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


class RenderArgs(StrictModel):
    """The flags of `vfleet render`, keyed by their command-line spelling."""

    model_path: AbsPath = Field(alias="--model-path")
    """model folder on the hosts (e.g. /srv/models/Llama-3.1-8B-Instruct)"""
    served_model_name: ModelName = Field(alias="--served-model-name")
    """API model name without control characters (e.g. meta-llama/Llama-3.1-8B-Instruct)"""
    vllm_bin: AbsPath = Field(alias="--vllm-bin")
    """vllm executable on the hosts (e.g. /opt/vfleet/vllm/bin/vllm)"""
    port: Port = Field(alias="--port")
    """first API port on each host, 1-65535 (e.g. 8000)"""
    backend: Literal["auto", "mp", "ray"] = Field(alias="--backend")
    """multi-node backend: auto, mp or ray"""
    api_key_file: AbsPath | None = Field(None, alias="--api-key-file")
    """API key file on the hosts (e.g. /etc/vfleet/secrets/api-key)"""
    install_dir: UnitPath = Field(alias="--install-dir")
    """where the units expect the files, a plain absolute path (e.g. /etc/vfleet)"""
    extra_args: list[Text] = Field(default_factory=list, alias="--extra-arg")
    """extra vllm serve arguments, one flag or value each (e.g. --enforce-eager)"""
    env: list[EnvItem] = Field(default_factory=list, alias="--env")
    """extra environment as KEY=VALUE (e.g. NCCL_DEBUG=INFO)"""
    draft_model_path: AbsPath | None = Field(None, alias="--draft-model-path")
    """EAGLE draft folder on the hosts (e.g. /srv/models/EAGLE3-LLaMA3.1-8B)"""
    plan_name: Text = Field(alias="--plan")
    """plan file name without control characters (e.g. plan.json)"""

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

    @property
    def env_pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple(tuple(item.split("=", 1)) for item in self.env)  # type: ignore[misc]


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
