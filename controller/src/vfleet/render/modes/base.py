"""What a launch-mode strategy is handed, and the steps every strategy shares.

A strategy is a function from one `Replica` to its engines, one per host in placement
order. The run-wide inputs (plan, cluster, options, flag registry, port book) travel in
`Run`; building an engine, its plan flags, its API flags and its expert-parallel flags is
done here so that the four strategies differ only in what their mode adds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vfleet.catalog.flag_registry import FlagSet
from vfleet.documents.plan import Plan
from vfleet.documents.render import check_extra_args
from vfleet.render.env_file import engine_env
from vfleet.render.ports import PortBook
from vfleet.render.types import EngineOnHost, Placement, RenderOptions
from vfleet.render.vllm_args import FlagCollector, common_flags, expert_flags
from vfleet.topology.cluster import Cluster, Node

MP_MULTINODE = (0, 11, 1)  # first release whose mp backend spans hosts


@dataclass(frozen=True)
class Run:
    """What every replica of one render shares."""

    plan: Plan
    cluster: Cluster
    opts: RenderOptions
    flags: FlagSet
    nodes: dict[str, Node]
    version: str  # the plan's vLLM release, else the flag set's
    release: tuple[int, int, int]  # `version`, parsed
    dp: int  # the plan's data-parallel size
    ports: PortBook


@dataclass(frozen=True)
class Replica:
    """One engine of the plan, its hosts in order (the first is its head) and its API port."""

    run: Run
    replica: str
    mode: str
    placement: Placement
    api_port: int

    @property
    def engine_id(self) -> str:
        return f"engine-{self.replica}"

    @property
    def hosts(self) -> list[str]:
        return [host for host, _ in self.placement]

    @property
    def head(self) -> Node:
        return self.run.nodes[self.placement[0][0]]

    def node(self, index: int) -> Node:
        return self.run.nodes[self.placement[index][0]]

    def engine(self, index: int, role: str, runs_vllm: bool = True) -> EngineOnHost:
        """The engine on the index-th host, with its environment and no flags yet."""
        opts = self.run.opts
        gpus = [rank.gpu for rank in self.placement[index][1]]
        env = engine_env(
            self.node(index),
            len(self.placement) > 1,
            self.run.cluster.inter_node.fabric,
            gpus,
            opts,
        )
        return EngineOnHost(
            id=self.engine_id,
            replica=self.replica,
            role=role,
            mode=self.mode,
            env=env,
            extra_args=opts.extra_args,
            runs_vllm=runs_vllm,
        )

    def start_flags(self, index: int, engine: EngineOnHost, serves_api: bool) -> FlagCollector:
        """The plan's flags, then the API's on the host that serves it."""
        f = FlagCollector(self.run.flags, self.run.version)
        common_flags(f, self.run.plan, self.run.opts)
        if serves_api:
            f.add(
                "--host",
                self.node(index).address or "127.0.0.1",
                "bind the API to the cluster's private address",
            )
            f.add("--port", self.api_port)
            engine.port = self.api_port
        return f

    def expert_flags(self, f: FlagCollector, engine: EngineOnHost) -> None:
        engine.env += expert_flags(
            f, self.run.plan, self.run.dp, self.run.release, self.run.opts.all2all_backend
        )

    def finish(self, engine: EngineOnHost, f: FlagCollector) -> EngineOnHost:
        """Seal the engine's flags; operator extras may not repeat or contradict them."""
        engine.flags = f.out
        if engine.runs_vllm:
            check_extra_args(
                self.run.opts.extra_args, self.run.flags, self.run.version, (x.name for x in f.out)
            )
        return engine


# A launch mode: one replica in, its engines out (one per host, in placement order).
LaunchMode = Callable[[Replica], list[EngineOnHost]]
