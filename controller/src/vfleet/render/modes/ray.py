"""Mode `ray`: TP/PP across hosts on a Ray cluster, for releases before 0.11.1 or on request.

Every host runs a Ray unit (head or worker, ports pinned by RayPorts); only the head runs
`vllm serve --distributed-executor-backend ray`, which reaches the workers through Ray.
"""

from __future__ import annotations

from vfleet.errors import UserError
from vfleet.inputs.values import check_unit_path
from vfleet.render.modes.base import Replica
from vfleet.render.types import EngineOnHost


def place(job: Replica) -> list[EngineOnHost]:
    opts = job.run.opts
    try:
        check_unit_path(opts.ray_bin)
    except ValueError as exc:
        raise UserError(
            f"--vllm-bin {opts.vllm_bin[:60]!r}: Ray mode starts {opts.ray_bin[:60]!r} "
            f"from a systemd unit, and that path {exc}: install vLLM under a plainer path"
        ) from None
    job.run.ports.claim_ray(job.hosts, job.engine_id)
    head = job.engine(0, "ray-head")
    f = job.start_flags(0, head, serves_api=True)
    job.expert_flags(f, head)
    f.add("--distributed-executor-backend", "ray", "engine spans a Ray cluster")
    out = [job.finish(head, f)]
    # Workers only join the Ray cluster: no vLLM process, no flags.
    out += [job.engine(i, "ray-worker", runs_vllm=False) for i in range(1, len(job.placement))]
    return out
