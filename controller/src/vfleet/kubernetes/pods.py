"""The containers of one LWS group: the leader's (which serves the API) and the workers'.

The `vllm serve` flags come from the code the host render uses (vfleet.render.vllm_args), so
a flag the release lacks is refused in the same words; what differs on Kubernetes is where
the addresses come from. LWS puts LWS_LEADER_ADDRESS, LWS_GROUP_SIZE and LWS_WORKER_INDEX in
every pod's environment, and a container's arguments name them as $(VAR), which Kubernetes
expands; every other `$` is doubled, so a value can never expand into something else.
Where a value needs arithmetic (a DP worker's first rank) or a Ray cluster must form first,
the container runs a POSIX shell script whose every literal word is shell-quoted.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vfleet.catalog.flag_registry import FlagSet
from vfleet.documents.lws import NO_RDMA, LwsOptions
from vfleet.documents.render import check_extra_args
from vfleet.kubernetes.groups import Group
from vfleet.render import kv_transfer
from vfleet.render.disaggregated import SIDE_CHANNEL_BASE
from vfleet.render.env_file import QUIET_ENV
from vfleet.render.types import Flag, RenderOptions
from vfleet.render.vllm_args import FlagCollector, common_flags, expert_flags
from vfleet.topology.cluster import Cluster

WARMUP_S = 300  # compile, CUDA graphs and the KV profile of a large model, after the load
STARTUP_MARGIN = 2.0  # a slow volume or a cold page cache must not kill a healthy start
MIN_STARTUP_S = 600
PROBE_PERIOD_S = 10
RAY_PORT = 6379
POD_IP = {"fieldRef": {"fieldPath": "status.podIP"}}
# The Ray head waits until every pod of the group has joined before vLLM asks Ray for GPUs.
_RAY_COUNT = (
    'import ray, sys; ray.init(address="auto", logging_level="ERROR"); '
    'sys.exit(sum(n["Alive"] for n in ray.nodes()) < int(sys.argv[1]))'
)
RAY_WAIT = f'until python3 -c {shlex.quote(_RAY_COUNT)} "$LWS_GROUP_SIZE"; do sleep 5; done'


@dataclass(frozen=True)
class FromEnv:
    """A value the pod's environment supplies (LWS_WORKER_INDEX, ...), then `suffix`."""

    name: str
    suffix: str = ""


@dataclass(frozen=True)
class Arithmetic:
    """A shell arithmetic expression over the environment (scripts only)."""

    expr: str


Arg = str | FromEnv | Arithmetic


@dataclass
class Container:
    """One container's launch: its argv (direct, or a script run by /bin/sh -c), its
    environment and the ports its processes bind."""

    argv: list[Arg]
    script_head: list[str] = field(default_factory=list)  # shell lines before the exec
    env: list[dict[str, Any]] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)  # what binds it -> port
    serves_api: bool = False
    notes: list[str] = field(default_factory=list)  # each vllm flag with why it is set

    def command(self) -> tuple[list[str], list[str]]:
        """(command, args) for the manifest, escaped for Kubernetes' $(VAR) expansion."""
        needs_shell = self.script_head or any(isinstance(a, Arithmetic) for a in self.argv)
        if not needs_shell:
            return [_kube(self.argv[0]), _kube(self.argv[1])], [_kube(a) for a in self.argv[2:]]
        lines = ["set -eu", *self.script_head, "exec " + shell_line(self.argv)]
        return ["/bin/sh", "-c"], [_escape("\n".join(lines) + "\n")]


def _escape(text: str) -> str:
    return text.replace("$", "$$")


def _kube(arg: Arg) -> str:
    if isinstance(arg, FromEnv):
        return f"$({arg.name}){_escape(arg.suffix)}"
    if isinstance(arg, Arithmetic):
        raise ValueError("arithmetic needs the shell")  # Container.command routes it there
    return _escape(arg)


def _shell_word(arg: Arg) -> str:
    if isinstance(arg, FromEnv):
        return f'"${{{arg.name}}}"' + (shlex.quote(arg.suffix) if arg.suffix else "")
    if isinstance(arg, Arithmetic):
        return f'"$(({arg.expr}))"'
    return shlex.quote(arg)


def shell_line(words: Sequence[Arg]) -> str:
    """The words on one logical line, each flag starting a continued line of its own."""
    out = ""
    for word in words:
        text = _shell_word(word)
        flag = isinstance(word, str) and word.startswith("--")
        out += (" \\\n  " if flag and out else " " if out else "") + text
    return out


def uses_rdma(group: Group, cluster: Cluster, lws: LwsOptions) -> bool:
    """Pods that move data between pods (multi-pod engines, P/D transfers) over the cluster's
    RDMA fabric request its device."""
    fabric = cluster.inter_node.fabric in ("infiniband", "roce")
    crosses = group.size > 1 or group.pool is not None
    return lws.rdma_resource != NO_RDMA and fabric and bool(group.node.ib_hcas) and crosses


def startup_seconds(weights_gib_per_pod: float, load_gbps: float) -> int:
    """How long the start-up probe waits: the weights read at `load_gbps`, then the warm-up,
    both with a margin, never under ten minutes (a whole multiple of the probe period)."""
    load_s = weights_gib_per_pod * 2**30 / (load_gbps * 1e9)
    wanted = (load_s + WARMUP_S) * STARTUP_MARGIN
    return max(MIN_STARTUP_S, math.ceil(wanted / PROBE_PERIOD_S) * PROBE_PERIOD_S)


class _Flags:
    """The collector, plus the flags whose value the pod's environment supplies."""

    def __init__(self, flags: FlagSet, version: str) -> None:
        self.f = FlagCollector(flags, version)
        self.dynamic: dict[str, Arg] = {}

    def add(self, name: str, value: Arg | int | None = None, why: str = "") -> None:
        if isinstance(value, FromEnv | Arithmetic):
            self.f.add(name, "from-env", why)
            self.dynamic[name] = value
        else:
            self.f.add(name, value, why)

    def note(self, flag: Flag) -> str:
        value = self.dynamic.get(flag.name, flag.value)
        shown = (
            f"$({value.name}){value.suffix}"
            if isinstance(value, FromEnv)
            else (f"$(({value.expr}))" if isinstance(value, Arithmetic) else value)
        )
        text = flag.name if shown is None else f"{flag.name} {shown}"
        return f"{text}  # {flag.why}" if flag.why else text

    def argv(self) -> list[Arg]:
        out: list[Arg] = []
        for flag in self.f.out:
            out.append(flag.name)
            if flag.value is not None:
                out.append(self.dynamic.get(flag.name, flag.value))
        return out


def _engine_flags(
    group: Group, leader: bool, opts: RenderOptions, flags: FlagSet
) -> tuple[list[Arg], list[tuple[str, str]], dict[str, int], list[str]]:
    """`vllm serve`'s arguments for one pod of the group, the environment they need, the
    ports they bind and each flag with its reason."""
    plan, version = group.plan, group.version
    c = _Flags(flags, version)
    common_flags(c.f, plan, opts)
    ports: dict[str, int] = {}
    if leader:
        c.add("--host", "0.0.0.0", "the pod's own network namespace: listen on its address")
        c.add("--port", opts.port)
        ports["the API"] = opts.port
    if group.mode == "single" and plan.data_parallel_size > 1:
        c.add("--data-parallel-size", plan.data_parallel_size, "plan: attention data parallel")
    elif group.mode == "mp":
        c.add("--nnodes", FromEnv("LWS_GROUP_SIZE"), "engine spans the group's pods (mp)")
        c.add("--node-rank", 0 if leader else FromEnv("LWS_WORKER_INDEX"))
        c.add("--master-addr", FromEnv("LWS_LEADER_ADDRESS"))
        c.add("--master-port", opts.master_port, "torch.distributed bootstrap")
        ports["torch.distributed"] = opts.master_port
    elif group.mode == "dp":
        start: Arg | int = 0 if leader else Arithmetic(f"LWS_WORKER_INDEX * {group.dp_local}")
        c.add("--data-parallel-size", plan.data_parallel_size, "plan: attention data parallel")
        c.add("--data-parallel-size-local", group.dp_local)
        c.add("--data-parallel-start-rank", start)
        c.add("--data-parallel-address", FromEnv("LWS_LEADER_ADDRESS"))
        c.add("--data-parallel-rpc-port", opts.dp_rpc_port, "DP coordination")
        ports["the DP handshake"] = opts.dp_rpc_port
    elif group.mode == "ray":
        c.add("--distributed-executor-backend", "ray", "engine spans a Ray cluster")
        ports["Ray"] = RAY_PORT
    if not leader and group.mode in ("mp", "dp"):
        c.add("--headless", None, "worker: no API server in this pod")
    env = expert_flags(c.f, plan, plan.data_parallel_size, group.release, opts.all2all_backend)
    if group.pool is not None:
        config = kv_transfer.kv_transfer_json(version, group.pool)
        c.add("--kv-transfer-config", config, f"P/D: the {group.pool} pool")
        count = kv_transfer.side_channel_ports(
            version, plan.tensor_parallel_size, plan.data_parallel_size
        )
        for offset in range(count):
            ports[f"the NIXL side channel ({offset + 1} of {count})"] = SIDE_CHANNEL_BASE + offset
    check_extra_args(opts.extra_args, flags, version, (x.name for x in c.f.out))
    argv: list[Arg] = ["vllm", "serve", opts.model_path, *c.argv(), *opts.extra_args]
    notes = [c.note(flag) for flag in c.f.out]
    return argv, env, ports, notes


def _env(
    group: Group,
    cluster: Cluster,
    opts: RenderOptions,
    lws: LwsOptions,
    extra: list[tuple[str, str]],
) -> list[dict[str, Any]]:
    """The container's environment: pod addresses by reference, the rest as values."""
    plain: list[tuple[str, str]] = []
    refs: list[dict[str, Any]] = []
    if group.size > 1 or group.pool is not None:
        refs.append({"name": "VLLM_HOST_IP", "valueFrom": POD_IP})
    if group.size > 1:
        plain += [
            ("NCCL_SOCKET_IFNAME", lws.pod_interface),
            ("GLOO_SOCKET_IFNAME", lws.pod_interface),
        ]
        node, fabric = group.node, cluster.inter_node.fabric
        if node.ib_hcas and fabric in ("infiniband", "roce"):
            plain.append(("NCCL_IB_HCA", ",".join(node.ib_hcas)))
            if fabric == "roce" and node.roce_gid_index is not None:
                plain.append(("NCCL_IB_GID_INDEX", str(node.roce_gid_index)))
    plain += list(QUIET_ENV) + extra
    if group.pool is not None:
        refs.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": POD_IP})
        channel = kv_transfer.SideChannel("", SIDE_CHANNEL_BASE, 1)
        wiring = kv_transfer.side_channel_env(group.version, channel)
        wiring.pop("VLLM_NIXL_SIDE_CHANNEL_HOST")
        hcas = list(group.node.ib_hcas) if uses_rdma(group, cluster, lws) else []
        wiring.update(kv_transfer.ucx_env(hcas))
        given = {key for key, _ in opts.extra_env}
        plain += [(key, value) for key, value in wiring.items() if key not in given]
    plain += list(opts.extra_env)
    for secret, key, var in (
        (lws.hf_token_secret, "token", "HF_TOKEN"),
        (lws.api_key_secret, "key", "VLLM_API_KEY"),
    ):
        if secret:
            refs.append({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return [*refs, *({"name": k, "value": _escape(v)} for k, v in plain)]


def containers(
    group: Group, cluster: Cluster, opts: RenderOptions, lws: LwsOptions, flags: FlagSet
) -> tuple[Container, Container | None]:
    """(the leader's container, the workers' or None for one-pod groups)."""
    leader_argv, extra, leader_ports, notes = _engine_flags(group, True, opts, flags)
    env = _env(group, cluster, opts, lws, extra)
    leader = Container(leader_argv, env=env, ports=leader_ports, serves_api=True, notes=notes)
    if group.size == 1:
        return leader, None
    if group.mode == "ray":
        gpus = f"--num-gpus={group.gpus}"
        leader.script_head = [
            shell_line(["ray", "start", "--head", f"--port={RAY_PORT}", gpus]),
            RAY_WAIT,
        ]
        leader.ports["Ray"] = RAY_PORT
        address = FromEnv("LWS_LEADER_ADDRESS", suffix=f":{RAY_PORT}")
        worker = Container(["ray", "start", "--address", address, gpus, "--block"], env=leader.env)
        return leader, worker
    worker_argv, _, worker_ports, worker_notes = _engine_flags(group, False, opts, flags)
    worker = Container(worker_argv, env=env, ports=worker_ports, notes=worker_notes)
    return leader, worker
