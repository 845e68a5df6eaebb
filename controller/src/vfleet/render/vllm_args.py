"""`vllm serve` flags from the plan, checked against the target release's flag registry.

Every launch mode starts from the same plan-derived flags; collecting them here means a
flag the release lacks is refused in one place, with one message, whatever the mode.
"""

from __future__ import annotations

from functools import cache

from vfleet.budget import speculative
from vfleet.catalog.flag_registry import FlagSet, recorded_versions
from vfleet.catalog.flag_registry import flag_set as registry_flag_set
from vfleet.catalog.releases import parse_version
from vfleet.documents.plan import Plan, Speculative
from vfleet.documents.render import model_folder
from vfleet.errors import UserError
from vfleet.render.env_file import ALL2ALL_ENV
from vfleet.render.types import Flag, RenderOptions

ALL2ALL_FLAG = (0, 11, 1)  # first release with --all2all-backend (before: an env var)


class FlagCollector:
    """Collects flags, refusing ones the target vLLM lacks when the plan needs them."""

    def __init__(self, flags: FlagSet, version: str) -> None:
        self.flags, self.version = flags, version
        self.out: list[Flag] = []

    def add(self, name: str, value: object = None, why: str = "", required: bool = True) -> None:
        if not self.flags.has(name):
            if not required:
                return
            first = first_release_with(name)
            since = f"it first appears in vLLM {first}" if first else "no recorded release has it"
            raise UserError(
                f"vLLM {self.version} has no {name} ({since}) but the plan needs it"
                f"{' (' + why + ')' if why else ''}: upgrade vLLM on the hosts"
                f"{' to ' + first + ' or later' if first else ''}, or re-plan with "
                f"`vfleet plan --vllm-version {self.version}` so the plan avoids it"
            )
        self.out.append(Flag(name, None if value is None else str(value), why))


@cache
def first_release_with(flag: str) -> str | None:
    for version in recorded_versions():
        if registry_flag_set(version).has(flag):
            return version
    return None


def common_flags(f: FlagCollector, plan: Plan, opts: RenderOptions) -> None:
    """The flags every engine that runs vLLM gets, whatever its launch mode."""
    f.add("--served-model-name", opts.served_model_name)
    f.add(
        "--tensor-parallel-size",
        plan.tensor_parallel_size,
        "plan: TP stays inside one NVLink domain",
    )
    f.add(
        "--pipeline-parallel-size",
        plan.pipeline_parallel_size,
        "plan: PP is what crosses slow links",
    )
    f.add("--max-model-len", plan.max_model_len, "plan: admits the workload's p99 request")
    f.add("--gpu-memory-utilization", plan.gpu_memory_utilization, "plan")
    f.add(
        "--max-num-seqs",
        plan.max_num_seqs,
        "plan: KV cap at the mean context and the SLOs, written out because the "
        "default depends on the device the config process sees",
    )
    f.add(
        "--max-num-batched-tokens",
        plan.max_num_batched_tokens,
        "plan: smallest chunk that meets p99 TTFT",
    )
    if plan.enable_chunked_prefill:
        f.add(
            "--enable-chunked-prefill", None, "plan: keeps inter-token tails short", required=False
        )
    f.add("--kv-cache-dtype", plan.kv_cache_dtype, "plan")
    if plan.block_size:
        f.add("--block-size", plan.block_size, "plan: the block size the budget assumed")
    if plan.decode_context_parallel_size > 1:
        f.add(
            "--decode-context-parallel-size",
            plan.decode_context_parallel_size,
            "plan: DCP shards the KV along the token axis",
        )
    if plan.speculative:
        _speculative_flag(f, plan.speculative, plan.model_type, opts)
    if plan.model_type == "deepseek_v4":
        f.add("--trust-remote-code", None, "DeepSeek V4 ships its own code")


def _speculative_flag(
    f: FlagCollector, sp: Speculative, model_type: str, opts: RenderOptions
) -> None:
    draft = sp.draft_model
    path = opts.draft_model_path or (model_folder(draft) if draft else None)
    conf = speculative.speculative_config(
        sp.model_dump(exclude_unset=True), model_type, parse_version(f.version), path
    )
    # JSON, one argument: the template shell-quotes it.
    f.add("--speculative-config", conf, f"plan: speculative decoding ({sp.method})")


def expert_flags(
    f: FlagCollector, plan: Plan, dp: int, release: tuple[int, int, int], all2all: str
) -> list[tuple[str, str]]:
    """Expert parallelism's flags; returns the environment it needs besides (the all-to-all
    backend was a variable before it was a flag)."""
    if not plan.enable_expert_parallel:
        return []
    f.add("--enable-expert-parallel", None, "plan: EP inside a fast domain")
    if dp <= 1:
        return []
    if release >= ALL2ALL_FLAG:
        f.add("--all2all-backend", all2all, "EP dispatch")
        return []
    return [(ALL2ALL_ENV, all2all)]
