"""The flags of the commands that act on an environment (deploy, destroy, probe, plan-env,
restart, validate, known-hosts, preflight, calibrate), one model per command, generated
into their parsers by vfleet.cli.from_model. Kept apart from vfleet.documents.requests so that
a planning command, which imports that module, does not build these as well."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from vfleet.documents import flag_types as flags
from vfleet.documents.flag_types import FilePath, Rule
from vfleet.inputs.strict import StrictModel

EnvName = Annotated[str, Rule(flags.env_name)]
Timeout = Annotated[float, Rule(flags.number(0, 300, example="10"))]


class EnvFlags(StrictModel):
    """An environment of the bundle (`probe`, `restart`; the other commands on an
    environment add their own flags)."""

    # A command validates only its own model: the others' validators need not be built.
    model_config = ConfigDict(defer_build=True)

    env: EnvName = "local"
    """local | staging | prod"""
    root: FilePath | None = None
    """the bundle (default: $VFLEET_ROOT, else the repository the command runs in)"""


class DeployFlags(EnvFlags):
    """`vfleet deploy` and `vfleet plan-env`."""

    allow_partial_facts: bool = False
    """plan even if a host's probe failed (hosts it saw no GPU on are left out)"""
    allow_degraded: bool = False
    """plan on hosts that failed a health check too (loudly; see vfleet preflight)"""


class PlanEnvFlags(DeployFlags):
    """`vfleet plan-env`."""

    target: Literal["hosts", "lws"] = "hosts"
    """hosts: the launch files only; lws: Kubernetes LeaderWorkerSet manifests too, into
    artifacts/ENV/lws (their inputs: group_vars vfleet_kubernetes)"""


class DestroyFlags(EnvFlags):
    """`vfleet destroy`."""

    purge: bool = False
    """also remove the ledger and the reports (kept by default: they are history)"""


class ValidateFlags(EnvFlags):
    """`vfleet validate`."""

    inventory: FilePath | None = None
    """check this inventory folder instead of inventories/ENV"""


class KnownHostsFlags(EnvFlags):
    """`vfleet known-hosts`: only the environments that check host keys."""

    env: EnvName
    """staging | prod"""


class CalibrateFlags(EnvFlags):
    """`vfleet calibrate`."""

    as_json: bool = Field(False, alias="json")
    """print the calibration document"""


class PreflightFlags(EnvFlags):
    """`vfleet preflight`."""

    all: bool = False
    """list the passing checks too"""
    as_json: bool = Field(False, alias="json")
    """print the sweep and every check as JSON"""
    timeout: Timeout = 10.0
    """seconds to reach one host"""


class UpgradeCheckFlags(StrictModel):
    """`vfleet upgrade-check`: an environment's deployment, or a plan on a cluster, against
    another vLLM release."""

    model_config = ConfigDict(defer_build=True)

    to: Annotated[str, Field(max_length=64)] | None = None
    """the vLLM release to check the upgrade to (with --env, default: its group_vars pin)"""
    env: EnvName | None = None
    """a deployed environment, its plan, facts and rendered files (local | staging | prod)"""
    root: FilePath | None = None
    """the bundle (default: $VFLEET_ROOT, else the repository the command runs in)"""
    plan: FilePath | None = None
    """a plan JSON from vfleet plan (instead of --env; with --cluster)"""
    cluster: FilePath | None = None
    """the plan's cluster YAML or probe facts directory (with --plan)"""
    as_json: bool = Field(False, alias="json")
    """print one JSON object"""
    gate: bool = False
    """with --env: --to must be the environment's pin (make upgrade checks what it rolls out)"""
