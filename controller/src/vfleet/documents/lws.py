"""What a Kubernetes render needs that the plan does not know, as `vfleet render` flags.

Every value lands in a manifest: each is narrowed here to what its Kubernetes field accepts
(DNS labels for names, label keys and values, resource names, quantities, image references),
so a bad one is refused in one line before anything is built, never left for the API server.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Annotated

from pydantic import ConfigDict, Field

from vfleet.documents import flag_types as flags
from vfleet.documents.flag_types import Derived, Rule
from vfleet.inputs.strict import StrictModel
from vfleet.inputs.values import check_interface

# Pods are named <lws>-<group>-<worker> and must stay DNS labels (63): 40 leaves room for
# the pool suffix (-prefill, -decode) and the indices.
MAX_NAME = 40
NO_RDMA = "none"

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_QUANTITY = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,3})?(?:Ki|Mi|Gi|Ti|k|M|G|T)?")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]{{1,5}})?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)
_PACKAGE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._-]+\])?(?:[=<>!~]=?[A-Za-z0-9.*+!_-]+)?"
)
_VERSION = re.compile(r"1\.(?:[0-9]|[1-9][0-9])")


def _shown(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _rule(check: Callable[[str], str]) -> Rule:
    """A check as the flag's parser: argparse reports a bad value as "argument --x: ..."."""

    def parse(text: str) -> str:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc}, got {_shown(text)}") from None

    return Rule(parse)


def _matching(pattern: re.Pattern[str], longest: int, what: str) -> Rule:
    def check(value: str) -> str:
        if len(value) > longest or not pattern.fullmatch(value):
            raise ValueError(f"must be {what}")
        return value

    return _rule(check)


def check_label_key(value: str) -> str:
    """A label or annotation key: an optional DNS-subdomain prefix and a name."""
    prefix, slash, name = value.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError("must be a label key: its prefix a DNS subdomain (e.g. example.com/rack)")
    if not _LABEL_NAME.fullmatch(name):
        raise ValueError("must be a label key: a name of 1-63 letters, digits, -_. (e.g. rack)")
    return value


def check_selector(value: str) -> str:
    key, sep, label = value.partition("=")
    if not sep:
        raise ValueError("must be KEY=VALUE (e.g. nvidia.com/gpu.product=NVIDIA-H200)")
    check_label_key(key)
    if not _LABEL_VALUE.fullmatch(label):
        raise ValueError("value must be a label value: 0-63 letters, digits, -_. inside")
    return value


def check_resource(value: str) -> str:
    if value == NO_RDMA:
        return value
    prefix, slash, _ = value.partition("/")
    if not slash or prefix.endswith("kubernetes.io"):
        raise ValueError("must be an extended resource with a domain (e.g. rdma/ib) or none")
    return check_label_key(value)


DnsLabel = Annotated[str, _matching(_DNS_LABEL, 63, "a DNS label: a-z, 0-9 and inner -")]
ObjectName = Annotated[
    str, _matching(_DNS_LABEL, MAX_NAME, f"a DNS label of at most {MAX_NAME} characters")
]
DnsSubdomain = Annotated[str, _matching(_DNS_SUBDOMAIN, 253, "a DNS subdomain: a-z, 0-9, - and .")]
LabelKey = Annotated[str, _rule(check_label_key)]
Selector = Annotated[str, _rule(check_selector)]
Image = Annotated[str, _matching(_IMAGE, 255, "an image reference (e.g. vllm/vllm-openai:v0.33.0)")]
Quantity = Annotated[str, _matching(_QUANTITY, 16, "a quantity (e.g. 16Gi)")]
Package = Annotated[str, _matching(_PACKAGE, 200, "a pip requirement (e.g. vllm-router==X.Y.Z)")]
KubeVersion = Annotated[str, _matching(_VERSION, 5, "a Kubernetes minor version (e.g. 1.34)")]
LoadRate = Annotated[float, Rule(flags.number(0.05, 400, example="2"))]


class LwsOptions(StrictModel):
    """`vfleet render --target lws`'s inputs beyond the plan: each with a default that works
    on a stock GPU cluster, and documented in docs/kubernetes.md."""

    model_config = ConfigDict(defer_build=True)

    image: Annotated[Image | None, Derived("vllm/vllm-openai:v<the plan's vLLM>")] = None
    """the engine image (e.g. vllm/vllm-openai:v0.33.0)"""
    namespace: DnsLabel = "default"
    """the namespace every object goes into"""
    lws_name: Annotated[ObjectName | None, Derived("the served model name as a DNS label")] = None
    """the objects' base name (e.g. deepseek-v3)"""
    weights_pvc: DnsSubdomain = "vfleet-models"
    """the PersistentVolumeClaim holding the model folder, mounted read-only above --model-path"""
    node_selector: tuple[Selector, ...] = Field((), strict=False)
    """a node label every engine pod requires, KEY=VALUE"""
    queue: DnsSubdomain | None = None
    """a Kueue LocalQueue: admits each group whole"""
    topology: LabelKey | None = None
    """a Kueue topology level each group must fit in (e.g. cloud.google.com/gce-topology-block)"""
    exclusive_topology: LabelKey | None = None
    """a node label key: one group per topology domain (LWS exclusive placement)"""
    rdma_resource: Annotated[str, _rule(check_resource)] = "rdma/ib"
    """the RDMA device resource each multi-pod or P/D pod requests where the cluster spec lists
    HCAs, or none"""
    shm_size: Quantity = "16Gi"
    """the memory-backed /dev/shm of each engine pod"""
    hf_token_secret: DnsSubdomain | None = None
    """a Secret whose key `token` becomes HF_TOKEN"""
    api_key_secret: DnsSubdomain | None = None
    """a Secret whose key `key` becomes VLLM_API_KEY (the API then wants it)"""
    load_gbps: LoadRate = 1.0
    """GB/s one pod reads its weights at, which sizes the start-up probe"""
    pod_interface: Annotated[str, _rule(check_interface)] = "eth0"
    """the pod network interface NCCL and Gloo bootstrap on"""
    router_image: Image | None = None
    """the P/D router's image (default: the engine image, installing --router-package at start)"""
    router_package: Package = "vllm-router"
    """what the router pod installs when no --router-image is given (pin it: vllm-router==X.Y.Z)"""
    kubernetes_version: KubeVersion = "1.34"
    """the cluster's Kubernetes minor version, whose schemas check the core objects"""
