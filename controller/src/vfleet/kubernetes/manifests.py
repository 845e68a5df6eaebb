"""The Kubernetes objects of a plan: per pool a LeaderWorkerSet and its leader's Service, the
plan itself as a ConfigMap, and for a disaggregated plan the router's Deployment and Service.

Plain dictionaries in the API's own field names; vfleet.kubernetes.schema_checks checks them
against the schemas before anything is written.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

from vfleet.catalog.flag_registry import FlagSet
from vfleet.documents.lws import LwsOptions
from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.kubernetes.groups import Group
from vfleet.kubernetes.pods import (
    PROBE_PERIOD_S,
    Container,
    containers,
    shell_line,
    startup_seconds,
    uses_rdma,
)
from vfleet.render.disaggregated import ROUTER_POLICY
from vfleet.render.types import RenderOptions
from vfleet.topology.cluster import Cluster

LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
GPU = "nvidia.com/gpu"


def labels(base: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": base,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "vfleet",
    }


def _meta(name: str, lws: LwsOptions, object_labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": lws.namespace, "labels": object_labels}


def weights_mount(opts: RenderOptions) -> str:
    """Where the weights volume is mounted: the folder above the model's."""
    mount = str(PurePosixPath(opts.model_path).parent)
    if mount == "/":
        raise UserError(
            f"--model-path {opts.model_path} sits at the root: the weights volume is mounted on "
            "the folder above the model's, so give a path like /srv/models/<name>"
        )
    draft = opts.draft_model_path
    if draft and not PurePosixPath(draft).is_relative_to(mount):
        raise UserError(
            f"--draft-model-path {draft} lies outside {mount}, where the weights volume is "
            "mounted: keep the draft beside the model"
        )
    return mount


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 5,
    }


def _container_spec(
    c: Container, image: str, group: Group, rdma: str | None, opts: RenderOptions, lws: LwsOptions
) -> dict[str, Any]:
    command, args = c.command()
    limits: dict[str, Any] = {GPU: group.gpus}
    if rdma:
        limits[rdma] = 1
    spec: dict[str, Any] = {
        "name": "vllm",
        "image": image,
        "command": command,
        "args": args,
        "env": c.env,
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [
            {"name": "weights", "mountPath": weights_mount(opts), "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if rdma:
        # NIXL and NCCL register (pin) memory with the HCA.
        spec["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    if c.serves_api:
        spec["ports"] = [{"name": "http", "containerPort": opts.port, "protocol": "TCP"}]
        weights = (group.plan.weights_gib_per_gpu or 0.0) * group.gpus
        startup = startup_seconds(weights, lws.load_gbps)
        spec["startupProbe"] = _probe("/health", PROBE_PERIOD_S, startup // PROBE_PERIOD_S)
        spec["readinessProbe"] = _probe("/health", PROBE_PERIOD_S, 3)
        spec["livenessProbe"] = _probe("/health", 30, 3)
    return spec


def _template(
    c: Container, image: str, group: Group, rdma: str | None, opts: RenderOptions, lws: LwsOptions
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels(_base(group), group.pool or "engine")}
    if lws.topology:
        meta["annotations"] = {TOPOLOGY: lws.topology}
    spec: dict[str, Any] = {
        "containers": [_container_spec(c, image, group, rdma, opts, lws)],
        "volumes": [
            {
                "name": "weights",
                "persistentVolumeClaim": {"claimName": lws.weights_pvc, "readOnly": True},
            },
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": lws.shm_size}},
        ],
    }
    if lws.node_selector:
        spec["nodeSelector"] = dict(item.split("=", 1) for item in lws.node_selector)
    return {"metadata": meta, "spec": spec}


def _base(group: Group) -> str:
    return group.name.removesuffix(f"-{group.pool}") if group.pool else group.name


def engine_image(plan: Plan, lws: LwsOptions) -> str:
    return lws.image or f"vllm/vllm-openai:v{plan.vllm_version}"


def leader_worker_set(
    group: Group, cluster: Cluster, opts: RenderOptions, lws: LwsOptions, flags: FlagSet
) -> tuple[dict[str, Any], list[Container]]:
    """The group's LeaderWorkerSet, and its containers (leader first) for the checks."""
    leader, worker = containers(group, cluster, opts, lws, flags)
    image = engine_image(group.plan, lws)
    rdma = lws.rdma_resource if uses_rdma(group, cluster, lws) else None
    template: dict[str, Any] = {
        "size": group.size,
        "restartPolicy": "RecreateGroupOnPodRestart",
    }
    if worker is None:
        template["workerTemplate"] = _template(leader, image, group, rdma, opts, lws)
    else:
        template["leaderTemplate"] = _template(leader, image, group, rdma, opts, lws)
        template["workerTemplate"] = _template(worker, image, group, rdma, opts, lws)
    object_labels = labels(_base(group), group.pool or "engine")
    if lws.queue:
        object_labels[QUEUE_LABEL] = lws.queue
    meta = _meta(group.name, lws, object_labels)
    if lws.exclusive_topology:
        meta["annotations"] = {EXCLUSIVE: lws.exclusive_topology}
    body = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": group.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": template,
        },
    }
    return body, [leader] + ([worker] if worker else [])


def api_service(group: Group, opts: RenderOptions, lws: LwsOptions) -> dict[str, Any]:
    """A Service over every group's leader (worker index 0), the pods that serve the API."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(f"{group.name}-api", lws, labels(_base(group), group.pool or "engine")),
        "spec": {
            "selector": {LWS_NAME_LABEL: group.name, LWS_INDEX_LABEL: "0"},
            "ports": [{"name": "http", "port": opts.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def leader_urls(group: Group, opts: RenderOptions, lws: LwsOptions) -> list[str]:
    """Each group's leader by its stable name: LWS gives leader pod <name>-<group> the
    hostname it has under the LWS's headless Service <name>."""
    ns = lws.namespace
    return [f"http://{group.name}-{i}.{group.name}.{ns}:{opts.port}" for i in range(group.replicas)]


def router(
    base: str, prefill: Group, decode: Group, opts: RenderOptions, lws: LwsOptions
) -> list[dict[str, Any]]:
    """vllm-router in P/D mode over every prefill and decode leader, and its Service."""
    name = f"{base}-router"
    argv = ["vllm-router", "--vllm-pd-disaggregation", "--policy", ROUTER_POLICY]
    for url in leader_urls(prefill, opts, lws):
        argv += ["--prefill", url]
    for url in leader_urls(decode, opts, lws):
        argv += ["--decode", url]
    argv += ["--host", "0.0.0.0", "--port", str(opts.port)]
    container: dict[str, Any] = {"name": "router"}
    if lws.router_image:
        escaped = [a.replace("$", "$$") for a in argv]
        container |= {"image": lws.router_image, "command": escaped[:1], "args": escaped[1:]}
    else:
        # The engine image has pip; the router comes from PyPI when the pod starts.
        install = ["pip", "install", "--no-cache-dir", "--target", "/tmp/router"]
        script = "\n".join(
            [
                "set -eu",
                shell_line([*install, lws.router_package]),
                'export PYTHONPATH=/tmp/router PATH="/tmp/router/bin:$PATH"',
                "exec " + shell_line(argv),
            ]
        )
        container |= {
            "image": engine_image(decode.plan, lws),
            "command": ["/bin/sh", "-c"],
            "args": [script.replace("$", "$$") + "\n"],
        }
    container |= {
        "ports": [{"name": "http", "containerPort": opts.port, "protocol": "TCP"}],
        "readinessProbe": _probe("/health", PROBE_PERIOD_S, 3),
        "livenessProbe": _probe("/health", 30, 3),
    }
    router_labels = labels(base, "router")
    selector = {
        k: router_labels[k] for k in ("app.kubernetes.io/instance", "app.kubernetes.io/component")
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, lws, router_labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": router_labels},
                "spec": {"containers": [container]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, lws, router_labels),
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": opts.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def plan_config(base: str, plan: Plan, flags_text: str, lws: LwsOptions) -> dict[str, Any]:
    """The plan the manifests came from and each flag's reason, for whoever reads the cluster."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(f"{base}-plan", lws, labels(base, "plan")),
        "data": {
            "plan.json": json.dumps(plan.document(), indent=2, sort_keys=True) + "\n",
            "flags.txt": flags_text,
        },
    }
