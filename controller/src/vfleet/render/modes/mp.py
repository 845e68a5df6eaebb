"""Mode `mp`: TP/PP across hosts with vLLM's multiprocessing backend.

Every host runs `vllm serve` with --nnodes/--node-rank and the head's torch.distributed
bootstrap (--master-addr/--master-port); only the head serves the API, the followers run
--headless. vLLM spans hosts this way from 0.11.1 on; older releases need Ray.
"""

from __future__ import annotations

from vfleet.errors import UserError
from vfleet.render.modes.base import MP_MULTINODE, Replica
from vfleet.render.types import EngineOnHost


def place(job: Replica) -> list[EngineOnHost]:
    if job.run.release < MP_MULTINODE:
        raise UserError(
            f"the mp backend spans hosts only from vLLM 0.11.1 (target {job.run.version}): "
            "use --backend ray or upgrade vLLM"
        )
    master_port = job.run.ports.master(job.hosts[0])
    out: list[EngineOnHost] = []
    for index in range(len(job.placement)):
        head = index == 0
        engine = job.engine(index, "head" if head else "follower")
        f = job.start_flags(index, engine, serves_api=head)
        f.add("--nnodes", len(job.placement), "engine spans hosts (mp backend)")
        f.add("--node-rank", index)
        f.add("--master-addr", job.head.address)
        f.add("--master-port", master_port, "torch.distributed bootstrap on the private network")
        engine.master_port = master_port
        if not head:
            f.add("--headless", None, "follower: no API server on this host")
        job.expert_flags(f, engine)
        out.append(job.finish(engine, f))
    return out
