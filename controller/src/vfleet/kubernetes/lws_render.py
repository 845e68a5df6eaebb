"""`vfleet render --target lws`: a plan and its cluster in, checked manifests written out.

The files, one object each, plus a kustomization.yaml naming them all (`kubectl apply -k`):
leaderworkerset-<name>.yaml per pool, service-<name>-api.yaml over its leaders,
configmap-<base>-plan.yaml with the plan and every flag's reason, and for a disaggregated
plan deployment-/service-<base>-router.yaml. Nothing is written unless every file passes
vfleet.kubernetes.schema_checks and the checks below, which no schema can express.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from vfleet.catalog.flag_registry import FlagSet
from vfleet.documents.lws import LwsOptions
from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.kubernetes import manifests
from vfleet.kubernetes.groups import Group, base_name, groups
from vfleet.kubernetes.pods import Container
from vfleet.render.disaggregated import refuse_keyed_pools
from vfleet.render.types import RenderOptions
from vfleet.render.write import write_render
from vfleet.topology.cluster import Cluster

_FILE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,80}[a-z0-9])?\.yaml")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


def is_manifest(entry: Path) -> bool:
    """What a Kubernetes render leaves in --out (it replaces only such folders)."""
    return entry.is_file() and not entry.is_symlink() and bool(_FILE.fullmatch(entry.name))


def _check_group(group: Group, pods: list[Container], flags: FlagSet) -> None:
    """The plan's promises the manifests must keep."""
    if group.size * group.gpus != group.engine_gpus:
        raise UserError(
            f"{group.name}: {group.size} pods x {group.gpus} GPUs is not the "
            f"{group.engine_gpus} GPUs of TP x PP x DP in the plan: re-plan"
        )
    for pod in pods:
        bound = list(pod.ports.values())
        clash = next((p for p in bound if bound.count(p) > 1), None)
        if clash is not None:
            users = [what for what, port in pod.ports.items() if port == clash]
            raise UserError(
                f"{group.name}: port {clash} is taken by both {users[0]} and {users[1]}: "
                "choose another --port"
            )
        if pod.argv[:2] != ["vllm", "serve"]:
            continue
        named = (a.split("=")[0] for a in pod.argv[3:] if isinstance(a, str))
        unknown = next((n for n in named if _FLAG.fullmatch(n) and not flags.has(n)), None)
        if unknown is not None:
            raise UserError(
                f"{group.name}: vLLM {group.version} has no {unknown}: drop it from "
                "--extra-arg or render for a release that has it"
            )


class _Dumper(yaml.SafeDumper):
    """Plain YAML: an object used twice (one env list for leader and workers) is written
    twice, never as an &anchor and *alias that a reader must resolve."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    """A script (several lines) as a literal block, the way a person would write it."""
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _text)


def _dump(body: dict[str, Any]) -> str:
    text = yaml.dump(body, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return "---\n" + text


def _file_name(body: dict[str, Any]) -> str:
    return f"{body['kind'].lower()}-{body['metadata']['name']}.yaml"


def manifests_for(
    plan: Plan, cluster: Cluster, opts: RenderOptions, lws: LwsOptions, flags: FlagSet
) -> tuple[dict[str, str], list[Group]]:
    """Every file of the render (name -> text), checked; and the groups, for the summary."""
    from vfleet.kubernetes.schema_checks import validate

    if lws.topology and not lws.queue:
        raise UserError(
            "--topology is read by Kueue, which admits only workloads with a queue: name the "
            "--queue too (or use --exclusive-topology, which LWS itself enforces)"
        )
    base = lws.lws_name or base_name(opts.served_model_name)
    pools = groups(plan, cluster, base, opts.backend)
    if len(pools) == 2:
        refuse_keyed_pools("--api-key-secret" if lws.api_key_secret else None)
    bodies: list[dict[str, Any]] = []
    notes: list[str] = []
    for group in pools:
        lws_body, pods = manifests.leader_worker_set(group, cluster, opts, lws, flags)
        _check_group(group, pods, flags)
        bodies += [lws_body, manifests.api_service(group, opts, lws)]
        for role, pod in zip(("leader", "workers"), pods, strict=False):
            notes.append(f"# {group.name} {role}")
            notes += pod.notes or [" ".join(str(a) for a in pod.argv)]
    if len(pools) == 2:
        bodies += manifests.router(base, pools[0], pools[1], opts, lws)
    bodies.append(manifests.plan_config(base, plan, "\n".join(notes) + "\n", lws))
    objects = {_file_name(body): body for body in bodies}
    files = {name: _dump(body) for name, body in objects.items()}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(objects),
    }
    files["kustomization.yaml"] = _dump(kustomization)
    validate(files, objects, lws.kubernetes_version)
    return files, pools


def render_lws(
    out: Path, plan: Plan, cluster: Cluster, opts: RenderOptions, lws: LwsOptions, flags: FlagSet
) -> list[Group]:
    """Check every manifest, then swap them into `out` whole."""
    files, pools = manifests_for(plan, cluster, opts, lws, flags)
    write_render(out, files, owns=is_manifest)
    return pools
