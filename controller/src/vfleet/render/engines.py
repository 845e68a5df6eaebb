"""Per-host launch artifacts from a plan: launch.sh, vllm.env and systemd units per engine,
plus endpoints.json and firewall.json (vfleet.render.firewall: the ports each host needs open, and
from whom). Pure: a plan document, a cluster spec, options and a flag set in; file contents
out. Writing them to disk is vfleet.render.write's job.

Inert by construction: host names and engine ids are RFC 1123 labels before they become
file or unit names, every value reaches a file through its format's filter
(vfleet.render.formats), and operator extras (`--extra-arg`, `--env`) may not set what vfleet
owns (vfleet.spec.render).

Launch modes, chosen per engine from where its ranks sit:
- single: every rank on one host;
- mp: TP/PP across hosts with vLLM's multiprocessing backend (--nnodes, --node-rank,
  --master-addr; followers --headless), vLLM 0.11.1 and later;
- ray: TP/PP across hosts on a Ray cluster (head and worker units,
  --distributed-executor-backend ray), for older releases or when asked;
- dp: data parallel across hosts (--data-parallel-size/-size-local/-start-rank/-address/
  -rpc-port, followers --headless), with expert parallelism for MoE models.
Independent replicas are simply several engines, one endpoint each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from types import SimpleNamespace
from typing import Any

from vfleet.budget import speculative
from vfleet.catalog.flags import FlagSet, recorded_versions
from vfleet.catalog.flags import flag_set as registry_flag_set
from vfleet.catalog.releases import parse_version
from vfleet.errors import UserError
from vfleet.plan.cluster import ClusterSpec, Node
from vfleet.render.firewall import exposure
from vfleet.render.formats import check_unit_path, environments
from vfleet.spec.render import check_env, check_extra_args
from vfleet.spec.values import check_address, check_label

MP_MULTINODE = (0, 11, 1)
ALL2ALL_FLAG = (0, 11, 1)


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


# Home directories that ProtectHome=yes would hide from the unit: when the service home, the
# model, vLLM or the key file lives under one of them, the unit gets ProtectHome=read-only
# (and ReadWritePaths= keeps the service home writable).
HOME_ROOTS = ("/home/", "/root/", "/run/user/")


@dataclass(frozen=True)
class RenderOptions:
    model_path: str
    served_model_name: str
    vllm_bin: str = "/opt/vfleet/vllm/bin/vllm"
    ray_bin: str = "/opt/vfleet/vllm/bin/ray"
    port: int = 8000
    master_port: int = 29501
    dp_rpc_port: int = 13345
    ray_port: int = 6379
    ray_ports: RayPorts = field(default_factory=RayPorts)
    backend: str = "auto"  # auto | mp | ray
    all2all_backend: str = "allgather_reducescatter"
    api_key_file: str | None = None
    install_dir: str = "/etc/vfleet"
    service_user: str = "vllm"
    # The service user's home: the only place the hardened units may write (caches).
    service_home: str = "/var/lib/vllm"
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    plan_name: str = "plan.json"
    draft_model_path: str | None = None  # EAGLE draft on the hosts (default /srv/models/<name>)


@dataclass
class Flag:
    name: str
    value: str | None = None
    why: str = ""

    def argv(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value]


@dataclass
class EngineOnHost:
    id: str  # unique per host, e.g. "engine-0" or "engine-0-node1"
    replica: str
    role: str  # single | head | follower | ray-head | ray-worker
    mode: str
    flags: list[Flag] = field(default_factory=list)
    env: list[tuple[str, str]] = field(default_factory=list)
    extra_args: tuple[str, ...] = ()
    port: int | None = None
    runs_vllm: bool = True

    def argv(self, opts: RenderOptions) -> list[str]:
        out = [opts.vllm_bin, "serve", opts.model_path]
        for flag in self.flags:
            out += flag.argv()
        return out + list(self.extra_args)


@dataclass
class HostRender:
    name: str
    address: str | None
    engines: list[EngineOnHost]
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class Rendered:
    hosts: list[HostRender]
    endpoints: list[dict[str, Any]]
    mode_by_replica: dict[str, str]


class _Flags:
    """Collects flags, refusing ones the target vLLM lacks when the plan needs them."""

    def __init__(self, flags: FlagSet, version: str) -> None:
        self.flags, self.version = flags, version
        self.out: list[Flag] = []

    def add(self, name: str, value: Any = None, why: str = "", required: bool = True) -> None:
        if not self.flags.has(name):
            if not required:
                return
            first = _first_release_with(name)
            since = f"it first appears in vLLM {first}" if first else "no recorded release has it"
            raise UserError(
                f"vLLM {self.version} has no {name} ({since}) but the plan needs it"
                f"{' (' + why + ')' if why else ''}: upgrade vLLM on the hosts"
                f"{' to ' + first + ' or later' if first else ''}, or re-plan with "
                f"`vfleet plan --vllm-version {self.version}` so the plan avoids it"
            )
        self.out.append(Flag(name, None if value is None else str(value), why))


@cache
def _first_release_with(flag: str) -> str | None:
    for version in recorded_versions():
        if registry_flag_set(version).has(flag):
            return version
    return None


def _replica_layout(plan: dict[str, Any]) -> dict[str, list[tuple[str, list[dict]]]]:
    """replica id -> [(host name, ranks on that host)] in host order."""
    out: dict[str, list[tuple[str, list[dict]]]] = {}
    for host in plan["hosts"]:
        for replica, ranks in host["engines"].items():
            out.setdefault(replica, []).append((host["host"], ranks))
    return out


def check_plan_matches_cluster(plan: dict[str, Any], cluster: ClusterSpec) -> None:
    nodes = {n.name: n for n in cluster.nodes}
    for host in plan.get("hosts") or []:
        name = host.get("host")
        if name not in nodes:
            raise UserError(
                f"plan places ranks on host {name!r}, which the cluster does not have "
                f"(hosts: {', '.join(nodes)}): re-plan against these facts"
            )
        gpus = [r["gpu"] for ranks in host["engines"].values() for r in ranks]
        node = nodes[name]
        if len(gpus) > node.gpus or any(g >= node.gpus or g < 0 for g in gpus):
            raise UserError(
                f"plan puts {len(gpus)} ranks on host {name} (GPUs {sorted(gpus)}) but it has "
                f"{node.gpus} GPUs: re-plan against these facts"
            )
        if len(set(gpus)) != len(gpus):
            raise UserError(f"plan gives one GPU of host {name} to two ranks: re-plan")


def _network_env(node: Node, multi_node: bool, fabric: str) -> list[tuple[str, str]]:
    env: list[tuple[str, str]] = []
    if node.address:
        env.append(("VLLM_HOST_IP", node.address))
    if node.bootstrap_interface:
        env += [
            ("NCCL_SOCKET_IFNAME", node.bootstrap_interface),
            ("GLOO_SOCKET_IFNAME", node.bootstrap_interface),
        ]
    if multi_node and node.ib_hcas and fabric in ("infiniband", "roce"):
        env.append(("NCCL_IB_HCA", ",".join(node.ib_hcas)))
        if fabric == "roce" and node.roce_gid_index is not None:
            env.append(("NCCL_IB_GID_INDEX", str(node.roce_gid_index)))
    return env


def _common_flags(f: _Flags, plan: dict[str, Any], opts: RenderOptions) -> None:
    f.add("--served-model-name", opts.served_model_name)
    f.add(
        "--tensor-parallel-size",
        plan["tensor_parallel_size"],
        "plan: TP stays inside one NVLink domain",
    )
    f.add(
        "--pipeline-parallel-size",
        plan["pipeline_parallel_size"],
        "plan: PP is what crosses slow links",
    )
    f.add("--max-model-len", plan["max_model_len"], "plan: admits the workload's p99 request")
    f.add("--gpu-memory-utilization", plan["gpu_memory_utilization"], "plan")
    f.add(
        "--max-num-seqs",
        plan["max_num_seqs"],
        "plan: KV cap at the mean context and the SLOs, written out because the "
        "default depends on the device the config process sees",
    )
    f.add(
        "--max-num-batched-tokens",
        plan["max_num_batched_tokens"],
        "plan: smallest chunk that meets p99 TTFT",
    )
    if plan.get("enable_chunked_prefill", True):
        f.add(
            "--enable-chunked-prefill", None, "plan: keeps inter-token tails short", required=False
        )
    f.add("--kv-cache-dtype", plan["kv_cache_dtype"], "plan")
    if plan.get("block_size"):
        f.add("--block-size", plan["block_size"], "plan: the block size the budget assumed")
    if plan.get("decode_context_parallel_size", 1) > 1:
        f.add(
            "--decode-context-parallel-size",
            plan["decode_context_parallel_size"],
            "plan: DCP shards the KV along the token axis",
        )
    if plan.get("speculative"):
        sp = plan["speculative"]
        draft = sp.get("draft_model")
        path = opts.draft_model_path or (
            f"/srv/models/{draft.rstrip('/').split('/')[-1]}" if draft else None
        )
        conf = speculative.speculative_config(
            sp, str(plan.get("model_type") or ""), parse_version(f.version), path
        )
        # JSON, one argument: the template shell-quotes it.
        f.add("--speculative-config", conf, f"plan: speculative decoding ({sp['method']})")
    if plan.get("model_type") == "deepseek_v4":
        f.add("--trust-remote-code", None, "DeepSeek V4 ships its own code")


QUIET_ENV = (("HF_HUB_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"))
ALL2ALL_ENV = "VLLM_ALL2ALL_BACKEND"  # before vLLM 0.11.1's --all2all-backend
LAUNCH_ENV = ("VLLM_BIN", "VLLM_API_KEY")  # launch.sh reads or sets them


def _engine_env(
    node: Node, multi: bool, cluster: ClusterSpec, gpus: list[int], opts: RenderOptions
) -> list[tuple[str, str]]:
    env = [("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in sorted(gpus)))]
    env += _network_env(node, multi, cluster.inter_node.fabric)
    env += list(QUIET_ENV)
    return env + list(opts.extra_env)


@cache
def vfleet_env_names() -> frozenset[str]:
    """Every variable vfleet sets for some engine: `--env` may not override them. Taken
    from the code that sets them, fed a node that has every probe field."""
    node: Any = SimpleNamespace(
        address="10.0.0.1", bootstrap_interface="eth0", ib_hcas=("mlx5_0",), roce_gid_index=3
    )
    opts = RenderOptions(model_path="/m", served_model_name="m")
    cluster: Any = SimpleNamespace(inter_node=SimpleNamespace(fabric="roce"))
    names = {key for key, _ in _engine_env(node, True, cluster, [0], opts)}
    return frozenset(names | {ALL2ALL_ENV, *LAUNCH_ENV})


def _check_names(plan: dict[str, Any], cluster: ClusterSpec) -> None:
    """Host names, engine ids and addresses become paths, unit names and unit text."""
    for node in cluster.nodes:
        try:
            check_label(node.name)
        except ValueError as exc:
            raise UserError(
                f"host name {node.name[:70]!r} {exc}: rename it in the cluster spec (it "
                "becomes a directory and a unit name)"
            ) from None
        try:
            if node.address is not None:
                check_address(node.address)
        except ValueError as exc:
            raise UserError(
                f"host {node.name}: address {node.address[:70]!r} {exc}: fix the cluster spec"
            ) from None
    for host in plan["hosts"]:
        for replica in host["engines"]:
            try:
                check_label(f"engine-{replica}")
            except ValueError as exc:
                raise UserError(
                    f"plan engine id {replica[:60]!r}: engine-{replica[:60]} {exc}: "
                    "re-run `vfleet plan --out`"
                ) from None


def render(
    plan: dict[str, Any], cluster: ClusterSpec, opts: RenderOptions, flags: FlagSet
) -> Rendered:
    check_plan_matches_cluster(plan, cluster)
    _check_names(plan, cluster)
    check_env(opts.extra_env, vfleet_env_names())
    version = plan.get("vllm_version") or flags.version
    v = parse_version(version)
    nodes = {n.name: n for n in cluster.nodes}
    hosts: dict[str, HostRender] = {
        h["host"]: HostRender(h["host"], nodes[h["host"]].address, []) for h in plan["hosts"]
    }
    next_port: dict[str, int] = {name: opts.port for name in hosts}
    # Two engines headed on one host must not share a bootstrap port either.
    next_master: dict[str, int] = {name: opts.master_port for name in hosts}
    next_rpc: dict[str, int] = {name: opts.dp_rpc_port for name in hosts}
    ray_clusters: dict[str, str] = {}
    endpoints: list[dict[str, Any]] = []
    modes: dict[str, str] = {}
    dp = int(plan.get("data_parallel_size", 1))
    for replica, placement in _replica_layout(plan).items():
        multi = len(placement) > 1
        if multi:
            missing = [h for h, _ in placement if not nodes[h].address]
            if missing:
                raise UserError(
                    f"host {missing[0]} has no address, and engine {replica} spans hosts: "
                    "add `address` to the cluster spec or plan from probe facts"
                )
        if not multi:
            mode = "single"
        elif dp > 1:
            mode = "dp"
        elif opts.backend == "ray" or (opts.backend == "auto" and v < MP_MULTINODE):
            mode = "ray"
        else:
            if v < MP_MULTINODE:
                raise UserError(
                    f"the mp backend spans hosts only from vLLM 0.11.1 (target {version}): "
                    "use --backend ray or upgrade vLLM"
                )
            mode = "mp"
        modes[replica] = mode
        if mode == "ray":
            try:
                check_unit_path(opts.ray_bin)
            except ValueError as exc:
                raise UserError(
                    f"--vllm-bin {opts.vllm_bin[:60]!r}: Ray mode starts {opts.ray_bin[:60]!r} "
                    f"from a systemd unit, and that path {exc}: install vLLM under a plainer path"
                ) from None
        head_name = placement[0][0]
        head = nodes[head_name]
        port = next_port[head_name]
        next_port[head_name] += 1
        master_port = next_master[head_name]
        rpc_port = next_rpc[head_name]
        if mode == "mp":
            next_master[head_name] += 1
        if mode == "dp":
            next_rpc[head_name] += 1
        if mode == "ray":
            for host_name, _ in placement:
                if host_name in ray_clusters:
                    raise UserError(
                        f"host {host_name} would run two Ray clusters (engines "
                        f"{ray_clusters[host_name]} and engine-{replica}), whose pinned ports "
                        "collide: use --backend mp (vLLM 0.11.1 or later) or re-plan"
                    )
                ray_clusters[host_name] = f"engine-{replica}"
        dp_start = 0
        for index, (host_name, ranks) in enumerate(placement):
            node = nodes[host_name]
            role = "single" if not multi else ("head" if index == 0 else "follower")
            f = _Flags(flags, version)
            engine = EngineOnHost(
                id=f"engine-{replica}",
                replica=replica,
                role=role,
                mode=mode,
                extra_args=opts.extra_args,
            )
            if mode == "ray":
                engine.role = "ray-head" if index == 0 else "ray-worker"
                engine.runs_vllm = index == 0
            gpus = [r["gpu"] for r in ranks]
            engine.env = _engine_env(node, multi, cluster, gpus, opts)
            if engine.runs_vllm:
                _common_flags(f, plan, opts)
                headless = role == "follower"
                if not headless:
                    f.add(
                        "--host",
                        node.address or "127.0.0.1",
                        "bind the API to the cluster's private address",
                    )
                    f.add("--port", port)
                    engine.port = port
                if mode == "mp":
                    f.add("--nnodes", len(placement), "engine spans hosts (mp backend)")
                    f.add("--node-rank", index)
                    f.add("--master-addr", head.address)
                    f.add(
                        "--master-port",
                        master_port,
                        "torch.distributed bootstrap on the private network",
                    )
                if mode == "dp":
                    local = len({r["dp_rank"] for r in ranks})
                    f.add("--data-parallel-size", dp, "plan: attention data parallel")
                    f.add("--data-parallel-size-local", local)
                    f.add("--data-parallel-start-rank", dp_start)
                    f.add("--data-parallel-address", head.address)
                    f.add(
                        "--data-parallel-rpc-port",
                        rpc_port,
                        "DP coordination on the private network",
                    )
                    dp_start += local
                elif dp > 1:
                    f.add("--data-parallel-size", dp, "plan: attention data parallel")
                if headless:
                    f.add("--headless", None, "follower: no API server on this host")
                if plan.get("enable_expert_parallel"):
                    f.add("--enable-expert-parallel", None, "plan: EP inside a fast domain")
                    if dp > 1:
                        if v >= ALL2ALL_FLAG:
                            f.add("--all2all-backend", opts.all2all_backend, "EP dispatch")
                        else:
                            engine.env.append(("VLLM_ALL2ALL_BACKEND", opts.all2all_backend))
                if mode == "ray":
                    f.add("--distributed-executor-backend", "ray", "engine spans a Ray cluster")
            engine.flags = f.out
            if engine.runs_vllm:
                check_extra_args(opts.extra_args, flags, version, (x.name for x in f.out))
            hosts[host_name].engines.append(engine)
        endpoints.append(
            {
                "engine": f"engine-{replica}",
                "mode": mode,
                "host": head_name,
                "address": head.address,
                "port": port,
                "url": f"http://{head.address or '127.0.0.1'}:{port}/v1",
                "health": f"http://{head.address or '127.0.0.1'}:{port}/health",
                "model": opts.served_model_name,
                "hosts": [h for h, _ in placement],
            }
        )
    return Rendered(list(hosts.values()), endpoints, modes)


def render_files(
    rendered: Rendered, opts: RenderOptions, flags: FlagSet, plan: dict[str, Any]
) -> dict[str, str]:
    """Relative path -> file content for everything `vfleet render` writes."""
    envs = environments()
    used = (opts.service_home, opts.model_path, opts.vllm_bin, opts.api_key_file or "")
    under_home = any(path.rstrip("/").startswith(HOME_ROOTS) for path in used)
    hardening = {
        "service_home": opts.service_home,
        "protect_home": "read-only" if under_home else "yes",
    }
    files: dict[str, str] = {}
    for host in rendered.hosts:
        for engine in host.engines:
            base = f"{host.name}/{engine.id}"
            ctx = {
                "host": host,
                "engine": engine,
                "plan_name": opts.plan_name,
                "flags_version": flags.version,
                "flag_source": flags.summary,
                "vllm_bin": opts.vllm_bin,
                "model_path": opts.model_path,
                "api_key_file": opts.api_key_file,
                "install_dir": opts.install_dir,
                "service_user": opts.service_user,
                "ray": engine.mode == "ray",
                "ray_unit": f"vfleet-ray-{engine.id}.service",
                **hardening,
            }
            files[f"{base}/vllm.env"] = envs[".env.j2"].get_template("vllm.env.j2").render(ctx)
            if engine.mode == "ray":
                head = next(
                    h
                    for h in rendered.hosts
                    if any(e.replica == engine.replica and e.role == "ray-head" for e in h.engines)
                )
                files[f"{base}/vfleet-ray-{engine.id}.service"] = (
                    envs[".service.j2"]
                    .get_template("ray.service.j2")
                    .render(
                        host=host,
                        role="head" if engine.role == "ray-head" else "worker",
                        engine_id=engine.id,
                        service_user=opts.service_user,
                        install_dir=opts.install_dir,
                        ray_bin=opts.ray_bin,
                        ray_port=opts.ray_port,
                        ray_ports=opts.ray_ports,
                        head_address=head.address,
                        **hardening,
                    )
                )
            if engine.runs_vllm:
                files[f"{base}/launch.sh"] = envs[".sh.j2"].get_template("launch.sh.j2").render(ctx)
                files[f"{base}/vfleet-vllm-{engine.id}.service"] = (
                    envs[".service.j2"].get_template("vllm.service.j2").render(ctx)
                )
                files[f"{base}/command.json"] = json.dumps(engine.argv(opts), indent=2) + "\n"
    files["endpoints.json"] = (
        json.dumps({"model": plan.get("model"), "endpoints": rendered.endpoints}, indent=2) + "\n"
    )
    files["firewall.json"] = json.dumps(exposure(rendered, opts), indent=2) + "\n"
    return files
