"""Mode `single`: every rank of the engine on one host, so one plain `vllm serve`.

Data parallel inside one host is still this mode: vLLM starts the DP ranks itself.
"""

from __future__ import annotations

from vfleet.render.modes.base import Replica
from vfleet.render.types import EngineOnHost


def place(job: Replica) -> list[EngineOnHost]:
    engine = job.engine(0, "single")
    f = job.start_flags(0, engine, serves_api=True)
    if job.run.dp > 1:
        f.add("--data-parallel-size", job.run.dp, "plan: attention data parallel")
    job.expert_flags(f, engine)
    return [job.finish(engine, f)]
