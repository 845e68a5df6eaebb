"""What `vfleet deploy` reads from an environment: the deploy variables in
`inventories/<env>/group_vars/*.yml` and the inventories (`hosts.yml`, Terraform's).

Deploy variables are the `vfleet_*` ones plus the firewall's source lists; every other
variable belongs to a role and is checked against that role's meta/argument_specs.yml by
Ansible's own validator (vfleet.environment.argspecs.check_role_vars). A value Ansible
templates at run time (a Jinja expression or a `!vault` value) is taken as written.

Secrets are also found by value: a plain token (`hf_...`, `sk-...`, a long high-entropy
string) anywhere in group_vars or an inventory is refused, whatever the variable is called.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    WrapValidator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from vfleet.documents.lws import LwsOptions
from vfleet.documents.plan import BlockSize, Version
from vfleet.documents.render import EnvItem, RenderOptions, check_extra_args
from vfleet.errors import UserError
from vfleet.inputs.files import Document, Path_, Vaulted
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.validate import validate
from vfleet.inputs.values import AbsPath, Address, Cidr, Label, Port, check_abs_path

TEMPLATE = re.compile(r"{{|{%")
WORKLOAD_PRESETS = ("chat", "rag", "batch")
_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*(=[^\n\x00]{0,4000})?")
_FLAG_HINT = "must be one `vllm serve` flag starting with -- (e.g. --enforce-eager)"
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


def _matches(pattern: re.Pattern[str], value: str, hint: str) -> str:
    if pattern.fullmatch(value):
        return value
    raise ValueError(hint)


def is_templated(value: Any) -> bool:
    """Whether Ansible resolves `value` at run time (so its type is known only then)."""
    return isinstance(value, Vaulted) or (isinstance(value, str) and bool(TEMPLATE.search(value)))


def _or_templated(value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
    return value if is_templated(value) else handler(value)


class _TemplatedSchema:
    """In the JSON Schema, a templated string is allowed next to the plain type."""

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        inner = handler(schema)
        template = {"type": "string", "pattern": "{{|{%", "description": "a Jinja expression"}
        return {"anyOf": [inner, template]}


_T = TypeVar("_T")

if TYPE_CHECKING:
    # What a field holds: the checked value, a value Ansible templates (a Jinja string or a
    # `!vault` value, taken as written), or None where the file leaves it out (the default;
    # pydantic does not validate defaults, so None is not accepted in a file).
    Templatable: TypeAlias = _T | str | Vaulted | None
else:
    # `Templatable[tp]`: `tp`, or a value Ansible templates (Jinja, `!vault`).
    Templatable = Annotated[_T, WrapValidator(_or_templated), _TemplatedSchema()]


def _name_path(value: str) -> str:
    if "\0" in value or "\n" in value or len(value) > 4096:
        raise ValueError("must be a file path on one line")
    return value


Text = Annotated[str, Field(min_length=1, max_length=4096)]
ExtraArg = Annotated[str, AfterValidator(lambda v: _matches(_FLAG, v, _FLAG_HINT))]
GpuCount = Annotated[int, Field(ge=1, le=1024)]
FileName = Annotated[Text, AfterValidator(_name_path)]
UserName = Annotated[
    str, AfterValidator(lambda v: _matches(_USER, v, "must be a Linux user name (e.g. ubuntu)"))
]


class PlanOverrides(StrictModel):
    """Plan values fixed before planning (vfleet_plan_overrides): the search plans around
    them, so the predictions describe the plan that runs."""

    max_model_len: Annotated[int, Field(ge=1, le=100_000_000)] | None = None
    """tokens per sequence (e.g. 8192)"""
    block_size: BlockSize | None = None
    """the KV block size in tokens (e.g. 16 on GPUs, 128 for the CPU build)"""
    max_num_seqs: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """sequences per engine rank (e.g. 256)"""
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    """tokens per engine step (e.g. 8192)"""
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    """the fraction of GPU memory vLLM may use, in (0, 1] (e.g. 0.92)"""
    enable_chunked_prefill: bool | None = None
    """whether long prompts are prefilled in chunks: true or false"""


class DeployVars(StrictModel):
    """The deploy variables of one group_vars file (role variables are checked by the roles'
    argument specs; unknown `vfleet_*` variables are refused)."""

    vfleet_model: Templatable[Text] = None
    """a catalog id from `vfleet models`, a model folder or a config.json (e.g. Qwen/Qwen3-8B)"""
    vfleet_model_dir_on_hosts: Templatable[AbsPath] = None
    """the absolute path of the model folder on the GPU hosts (e.g. /srv/models/DeepSeek-V3)"""
    vfleet_served_model_name: Templatable[Text] = None
    """the model name clients send (e.g. deepseek-ai/DeepSeek-V3)"""
    vfleet_workload: Templatable[Text] = None
    """a preset (chat, rag, batch) or a workload YAML file next to group_vars"""
    vfleet_vllm_version: Templatable[Version] = None
    """the vLLM release on the hosts, quoted (e.g. "0.11.1")"""
    vfleet_kv_cache_dtype: Templatable[Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]] = None
    """the KV cache dtype: auto, or fp8 where the GPU and the attention backend support it"""
    vfleet_serving_mode: Templatable[Literal["auto", "aggregated", "disaggregated"]] = None
    """aggregated (default), disaggregated (prefill and decode pools behind a router) or auto"""
    vfleet_router_host: Templatable[Label] = None
    """the inventory host that runs the P/D router (default: the first prefill host)"""
    vfleet_plan_overrides: PlanOverrides | None = None
    """plan values forced after planning (e.g. {max_model_len: 512, block_size: 128})"""
    vfleet_render_extra_args: list[Templatable[ExtraArg]] | None = None
    """more `vllm serve` flags, each one string (e.g. [--enforce-eager, --dtype=bfloat16])"""
    vfleet_render_env: list[Templatable[EnvItem]] | None = None
    """more environment for every engine, each KEY=VALUE (e.g. [NCCL_DEBUG=INFO])"""
    vfleet_wheelhouse_port: Templatable[Port] = None
    """the port the controller serves the wheelhouse on, 1-65535 (e.g. 8080)"""
    vfleet_api_key_file: Templatable[FileName] = None
    """the API key file on the controller (mode 0600), absolute or relative to the repository"""
    vfleet_known_hosts_file: Templatable[Text] = None
    """the SSH known_hosts file for this environment (e.g. inventories/prod/known_hosts)"""
    vfleet_expect_gpu: Templatable[Text] = None
    """the GPU every host must have, as `vfleet gpus` names it (e.g. H200-SXM-141GB)"""
    vfleet_expect_gpus_per_host: Templatable[GpuCount] = None
    """how many GPUs every host must have, 1 to 1024 (e.g. 8)"""
    firewall_ssh_sources: Templatable[list[Templatable[Cidr]]] = None
    """the networks SSH is open to, in CIDR form (e.g. [10.0.0.0/8])"""
    firewall_api_sources: Templatable[list[Templatable[Cidr]]] = None
    """the networks the API is open to, in CIDR form (e.g. [10.0.0.0/8])"""
    vfleet_allow_ssh_commands: bool | None = None
    """true to let SSH options run commands on this machine (ProxyCommand, ...), warned each time"""
    vfleet_kubernetes: LwsOptions | None = None
    """`make plan TARGET=lws`'s inputs, by `vfleet render` flag without -- (e.g. {image: ...})"""


# ---- inventories ------------------------------------------------------------------------


class HostVars(StrictModel):
    """A host's variables in an inventory; other Ansible and role variables are allowed."""

    model_config = ConfigDict(extra="allow")

    ansible_host: Templatable[Address] = None
    """the address Ansible connects to, an IP or a DNS name (e.g. 10.0.0.11)"""
    ansible_port: Templatable[Port] = None
    """the SSH port, 1-65535 (e.g. 22)"""
    ansible_user: Templatable[UserName] = None
    """the SSH user (e.g. ubuntu)"""
    vfleet_private_address: Templatable[Address] | None = None
    """the host's address on the cluster network (e.g. 10.1.0.11)"""
    vfleet_gpus: Templatable[GpuCount] = None
    """the host's GPU count, 1 to 1024 (e.g. 8)"""
    vfleet_gpu: Templatable[Text] = None
    """the host's GPU as `vfleet gpus` names it (e.g. H200-SXM-141GB)"""
    vfleet_allow_ssh_commands: bool | None = None
    """true to let this host's SSH options run commands on this machine (e.g. ProxyCommand)"""
    firewall_ssh_sources: Templatable[list[Templatable[Cidr]]] = None
    """the networks SSH is open to, in CIDR form (e.g. [10.0.0.0/8])"""
    firewall_api_sources: Templatable[list[Templatable[Cidr]]] = None
    """the networks the API is open to, in CIDR form (e.g. [10.0.0.0/8])"""
    # Written by Terraform's ansible_inventory module into artifacts/<env>/hosts.yml.
    vfleet_env: Templatable[Literal["local", "staging", "prod"]] = None
    """the environment the inventory is for: local, staging or prod"""
    vfleet_cluster: Templatable[Text] = None
    """the cluster's name in Terraform (e.g. prod)"""
    vfleet_inventory_source: Templatable[Text] = None
    """the Terraform module that made the hosts (e.g. local_testbed)"""
    vfleet_profile: Templatable[Text] = None
    """the hardware profile the hosts replay (e.g. h200-1gpu)"""
    vfleet_source_inventory: Templatable[AbsPath] = None
    """the inventory Terraform read the hosts from (e.g. /run/vfleet-testbed/local/inventory.yml)"""


GroupName = Annotated[
    str, AfterValidator(lambda v: _matches(_GROUP, v, "must be letters, digits, underscores"))
]


class Group(StrictModel):
    """An inventory group: its hosts, their shared variables and its child groups."""

    hosts: dict[Label, HostVars | None] | None = None
    """host name -> its variables; a host name is an RFC 1123 label (e.g. gpu-node-01)"""
    vars: HostVars | None = None
    """variables of every host in the group"""
    children: dict[GroupName, Group | None] | None = None
    """group name -> group (letters, digits, underscores, e.g. gpu_hosts)"""


class Inventory(StrictModel):
    """An Ansible YAML inventory (inventories/<env>/hosts.yml, artifacts/<env>/hosts.yml)."""

    all: Group | None
    """the top group: every host and group sits under it"""


def _unknown_vfleet(values: dict[str, Any], known: set[str], doc: Document, base: Path_) -> None:
    for key in values:
        if isinstance(key, str) and key.startswith("vfleet_") and key not in known:
            guess = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            advice = f"did you mean {guess[0]!r}?" if guess else "not a vfleet variable"
            line = doc.line_of((*base, key))
            where = doc.source + (f" line {line}" if line else "")
            dotted = ".".join(map(str, (*base, key)))
            raise UserError(f"{where}: {dotted}: unknown vfleet variable: {advice}")


def check_deploy_vars(doc: Document) -> DeployVars:
    """One group_vars file's deploy variables, or one UserError line naming the file,
    the line, the variable and what to write."""
    values = doc.data or {}
    model_keys = set(DeployVars.model_fields)
    _unknown_vfleet(values, model_keys, doc, ())
    subset = {k: v for k, v in values.items() if k in model_keys}
    return validate(DeployVars, Document(subset, doc.source, doc.lines))


def _groups(group: Group | None, path: Path_) -> Iterator[tuple[Group, Path_]]:
    if group is None:
        return
    yield group, path
    for name, child in (group.children or {}).items():
        yield from _groups(child, (*path, "children", name))


def check_inventory(doc: Document) -> Inventory:
    """An inventory's shape, host names, addresses, ports and firewall sources."""
    if not isinstance(doc.data, dict):
        raise UserError(f"{doc.source}: must be a YAML inventory with an `all:` group")
    inventory = validate(Inventory, doc)
    known = set(HostVars.model_fields)
    for group, path in _groups(inventory.all, ("all",)):
        for host, hostvars in (group.hosts or {}).items():
            if hostvars is not None:
                _unknown_vfleet(hostvars.model_extra or {}, known, doc, (*path, "hosts", host))
        if group.vars is not None:
            _unknown_vfleet(group.vars.model_extra or {}, known, doc, (*path, "vars"))
    return inventory


# ---- what the deploy hands `vfleet render` (vfleet.deploy.flow.render) ----------------------
# group_vars the deploy renders from: variable -> (RenderOptions field, suffix; None: a list).
RENDER_FIELDS: dict[str, tuple[str, str | None]] = {
    "vfleet_model_dir_on_hosts": ("model_path", ""),
    "vfleet_served_model_name": ("served_model_name", ""),
    "vllm_venv": ("vllm_bin", "/bin/vllm"),
    "vllm_router_venv": ("router_bin", "/bin/vllm-router"),
    "vfleet_router_host": ("router_host", ""),
    "vfleet_render_extra_args": ("extra_args", None),
    "vfleet_render_env": ("env", None),
}


def check_render_values(values: dict[str, Any], origin: dict[str, str]) -> None:
    """The group_vars the deploy renders from (merged, pins resolved; `origin`: each one's
    file), by render's own types and rules, so validate refuses what render would. A Jinja
    value is handed to render as written, so it is checked as written too."""
    _check_extra_args(values, origin)
    for name, (field, suffix) in RENDER_FIELDS.items():
        value = values.get(name)
        if not isinstance(value, str) or suffix is None:
            continue
        info = RenderOptions.model_fields[field]
        field_type: Any = Annotated[info.annotation, *info.metadata]  # the field as declared
        adapter: TypeAdapter[Any] = TypeAdapter(field_type)
        try:
            adapter.validate_python(value + suffix, strict=True)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            shown = repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
            path = f"an absolute path ({info.alias} is it + {suffix})"
            hint = path if suffix else info.description
            raise UserError(
                f"{origin.get(name, 'group_vars')}: {name}: {error}, got {shown}: "
                f"`vfleet render` refuses it; write {hint}"
            ) from None


def _check_extra_args(values: dict[str, Any], origin: dict[str, str]) -> None:
    """vfleet_render_extra_args by render's own rule (spec.render.check_extra_args), against
    the flags of vfleet_vllm_version (else of the newest recorded release)."""
    extra = values.get("vfleet_render_extra_args")
    if not isinstance(extra, list) or not extra:
        return
    from vfleet.catalog.flag_registry import flag_set, recorded_versions

    version = values.get("vfleet_vllm_version")
    if not isinstance(version, str) or is_templated(version):
        if not recorded_versions():
            return  # no flag record shipped: render cannot check either
        version = recorded_versions()[-1]
    try:
        check_extra_args(
            [str(a) for a in extra if not isinstance(a, Vaulted)], flag_set(version), version
        )
    except UserError as exc:
        where = origin.get("vfleet_render_extra_args", "group_vars")
        raise UserError(f"{where}: vfleet_render_extra_args: {exc}") from None


# ---- secrets by value ---------------------------------------------------------------------

_TOKENS = (
    re.compile(r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    re.compile(r"sk-[A-Za-z0-9_-]{20,}"),  # OpenAI-style API keys
    re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"),
    re.compile(r"glpat-[A-Za-z0-9_-]{20,}"),
    re.compile(r"xox[abprs]-[A-Za-z0-9-]{20,}"),
    re.compile(r"AKIA[0-9A-Z]{16}"),
)
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
_LONG_NUMBER = re.compile(r"[0-9]{24,}")
_LITERAL_ONLY = re.compile(r"""\s*\{\{\s*(?:'([^']*)'|"([^"]*)")\s*\}\}\s*""")
_SECRETISH_NAME = re.compile(r"token|secret|passw|api_?key|credential", re.IGNORECASE)


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_like_token(value: str, name: str = "") -> bool:
    """A value shaped like a credential: a known token prefix, or a long opaque string
    (mixed case and digits, high entropy), or a token-length number. Paths, URLs, model ids
    and checksums (hex only) are not, unless the variable's name says it is a secret."""
    text = value.strip()
    if any(p.search(text) for p in _TOKENS):
        return True
    if text.startswith(("/", "./", "../", "~")):
        return False  # a path: where a secret is, not the secret
    is_location = name.endswith(("_file", "_path", "_dir", "_url"))
    secretish = bool(_SECRETISH_NAME.search(name)) and not is_location
    if _LONG_NUMBER.fullmatch(text):
        return True
    if not _OPAQUE.fullmatch(text):
        return False
    if re.fullmatch(r"[0-9a-fA-F]+", text):
        return secretish  # a sha256 or a fingerprint is hex too
    mixed = any(c.isupper() for c in text) and any(c.islower() for c in text)
    mixed = mixed and any(c.isdigit() for c in text)
    return (mixed and _entropy(text) >= 4.0) or (secretish and _entropy(text) >= 3.5)


def _plain(value: Any) -> str | None:
    """The text of a value that is written in the file as it is: a plain string or number,
    or a Jinja expression that only wraps a literal. None for anything Ansible resolves."""
    if isinstance(value, Vaulted | bool):
        return None
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        return None
    if TEMPLATE.search(value):
        only = _LITERAL_ONLY.fullmatch(value)
        return None if only is None else (only.group(1) or only.group(2) or "")
    return value


def _leaves(value: Any, path: Path_) -> Iterator[tuple[Path_, Any]]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaves(sub, (*path, key))
    elif isinstance(value, list | tuple):
        for i, sub in enumerate(value):
            yield from _leaves(sub, (*path, i))
    else:
        yield path, value


def _variables(doc: Document) -> Iterator[tuple[str, Path_, Any]]:
    """(variable name, path, value) of every variable a group_vars file or an inventory
    sets: a group_vars file is variables at the top; an inventory has them under hosts and
    vars of each group."""
    data = doc.data
    if not isinstance(data, dict):
        return
    if "all" not in data:
        for name, value in data.items():
            for path, leaf in _leaves(value, (name,)):
                yield str(name), path, leaf
        return
    stack: list[tuple[Any, Path_]] = [(data.get("all"), ("all",))]
    while stack:
        group, path = stack.pop()
        if not isinstance(group, dict):
            continue
        scopes = [((*path, "vars"), group.get("vars"))]
        for host, hostvars in (group.get("hosts") or {}).items():
            scopes.append(((*path, "hosts", host), hostvars))
        for base, scope in scopes:
            for name, value in (scope or {}).items() if isinstance(scope, dict) else ():
                for leaf_path, leaf in _leaves(value, (*base, name)):
                    yield str(name), leaf_path, leaf
        for child, sub in (group.get("children") or {}).items():
            stack.append((sub, (*path, "children", child)))


def check_no_plain_secrets(doc: Document) -> None:
    """Refuse a token written in clear text anywhere in a group_vars file or inventory."""
    for name, path, value in _variables(doc):
        text = _plain(value)
        if text is None or not looks_like_token(text, name):
            continue
        line = doc.line_of(path)
        where = doc.source + (f" line {line}" if line else "")
        raise UserError(
            f"{where}: {name} holds what looks like a secret in clear text: vault it "
            f"(ansible-vault encrypt_string --name {name}) or read it from a 0600 file "
            "with a lookup ({{ lookup('ansible.builtin.file', PATH) }})"
        )


__all__ = [
    "WORKLOAD_PRESETS",
    "DeployVars",
    "Group",
    "HostVars",
    "Inventory",
    "PlanOverrides",
    "check_abs_path",
    "check_deploy_vars",
    "check_inventory",
    "check_no_plain_secrets",
    "check_render_values",
    "is_templated",
    "looks_like_token",
]
