"""Mode `dp`: data parallel across hosts (with expert parallelism for MoE models).

Every host runs `vllm serve` for its share of the DP ranks (--data-parallel-size-local,
starting at --data-parallel-start-rank) and meets the others at the head's DP handshake
(--data-parallel-address/--data-parallel-rpc-port); only the head serves the API.
"""

from __future__ import annotations

from vfleet.render.modes.base import Replica
from vfleet.render.types import EngineOnHost


def place(job: Replica) -> list[EngineOnHost]:
    rpc_port = job.run.ports.dp_rpc(job.hosts[0])
    out: list[EngineOnHost] = []
    start = 0
    for index, (_, ranks) in enumerate(job.placement):
        head = index == 0
        engine = job.engine(index, "head" if head else "follower")
        f = job.start_flags(index, engine, serves_api=head)
        local = len({rank.dp_rank for rank in ranks})
        f.add("--data-parallel-size", job.run.dp, "plan: attention data parallel")
        f.add("--data-parallel-size-local", local)
        f.add("--data-parallel-start-rank", start)
        f.add("--data-parallel-address", job.head.address)
        f.add("--data-parallel-rpc-port", rpc_port, "DP coordination on the private network")
        engine.dp_rpc_port = rpc_port
        start += local
        if not head:
            f.add("--headless", None, "follower: no API server on this host")
        job.expert_flags(f, engine)
        out.append(job.finish(engine, f))
    return out
