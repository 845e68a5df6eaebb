"""From a command's values to RenderOptions, and a whole render into a folder. `vfleet render`
and the deploy share both, so a deploy renders in process from the plan it just made."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vfleet.catalog.flag_registry import FlagSet
from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.inputs.files import Document
from vfleet.inputs.validate import describe
from vfleet.render.engines import render
from vfleet.render.file_set import render_files
from vfleet.render.types import Rendered, RenderOptions
from vfleet.render.write import check_out, write_render
from vfleet.topology.cluster import Cluster


def engines_per_host(plan: Plan) -> int:
    """The most engines headed on one host (they take consecutive API ports)."""
    heads: dict[str, int] = {}
    for replica in {r: None for h in plan.hosts for r in h.engines}:
        head = next(h.host for h in plan.hosts if replica in h.engines)
        heads[head] = heads.get(head, 0) + 1
    return max(heads.values(), default=1)


def render_options(plan: Plan, given: Mapping[str, Any], source: str) -> RenderOptions:
    """`given` holds the values set, by their `vfleet render` flag names; the others take
    the model's defaults (the model path and name from the plan). Each is checked for the
    file it lands in (vfleet.documents.render) and the first problem is one line naming `source`."""
    values = {**RenderOptions.plan_defaults(plan.model), **given}
    context = {"engines_per_host": engines_per_host(plan)}
    try:
        return RenderOptions.model_validate(values, by_alias=True, by_name=False, context=context)
    except ValidationError as exc:
        raise UserError(describe(exc, RenderOptions, Document(values, source))) from None


def render_into(
    out: Path, plan: Plan, cluster: Cluster, opts: RenderOptions, flags: FlagSet
) -> Rendered:
    """Render every host's files and swap them into `out` whole (nothing half-written)."""
    check_out(out)
    rendered = render(plan, cluster, opts, flags)
    write_render(out, render_files(rendered, opts, flags, plan))
    return rendered
