"""From a command's values to RenderOptions, and a whole render into a folder. `vfleet render`
and the deploy share both, so a deploy renders in process from the plan it just made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vfleet.catalog.flags import FlagSet
from vfleet.errors import UserError
from vfleet.inputs.files import Document
from vfleet.inputs.validate import describe
from vfleet.plan.cluster import ClusterSpec
from vfleet.render.engines import render
from vfleet.render.files import render_files
from vfleet.render.types import Rendered, RenderOptions
from vfleet.render.write import check_out, write_render
from vfleet.spec.render import RenderArgs


def default_values(plan: dict[str, Any]) -> dict[str, Any]:
    """`vfleet render`'s defaults for this plan, by flag name: what a caller that sets only
    some values (the deploy, from group_vars) starts from."""
    name = plan["model"].rstrip("/").split("/")[-1]
    return {
        "--model-path": f"/srv/models/{name}",
        "--served-model-name": plan["model"],
        "--vllm-bin": "/opt/vfleet/vllm/bin/vllm",
        "--port": 8000,
        "--backend": "auto",
        "--api-key-file": None,
        "--install-dir": "/etc/vfleet",
        "--extra-arg": [],
        "--env": [],
        "--draft-model-path": None,
        "--plan": "plan.json",
    }


def engines_per_host(plan: dict[str, Any]) -> int:
    """The most engines headed on one host (they take consecutive API ports)."""
    heads: dict[str, int] = {}
    for replica in {r: None for h in plan["hosts"] for r in h["engines"]}:
        head = next(h["host"] for h in plan["hosts"] if replica in h["engines"])
        heads[head] = heads.get(head, 0) + 1
    return max(heads.values(), default=1)


def render_options(plan: dict[str, Any], given: dict[str, Any], source: str) -> RenderOptions:
    """`given` holds the values by their `vfleet render` flag names; each is checked for the
    file it lands in (vfleet.spec.render) and the first problem is one line naming `source`."""
    try:
        checked = RenderArgs.model_validate(
            given, context={"engines_per_host": engines_per_host(plan)}
        )
    except ValidationError as exc:
        raise UserError(describe(exc, RenderArgs, Document(given, source))) from None
    return RenderOptions(
        model_path=checked.model_path,
        served_model_name=checked.served_model_name,
        vllm_bin=checked.vllm_bin,
        ray_bin=str(Path(checked.vllm_bin).with_name("ray")),
        port=checked.port,
        backend=checked.backend,
        api_key_file=checked.api_key_file,
        install_dir=checked.install_dir,
        extra_args=tuple(checked.extra_args),
        extra_env=checked.env_pairs,
        plan_name=checked.plan_name,
        draft_model_path=checked.draft_model_path,
    )


def render_into(
    out: Path, plan: dict[str, Any], cluster: ClusterSpec, opts: RenderOptions, flags: FlagSet
) -> Rendered:
    """Render every host's files and swap them into `out` whole (nothing half-written)."""
    check_out(out)
    rendered = render(plan, cluster, opts, flags)
    write_render(out, render_files(rendered, opts, flags, plan))
    return rendered
