"""`make plan TARGET=lws` (`vfleet plan-env --target lws`): the environment's plan rendered
for its hosts and, from the same objects, as Kubernetes manifests with its vfleet_kubernetes
inputs."""

from __future__ import annotations

import yaml

from support.bundles import deploy_context
from vfleet.deploy.pipeline import Run, run_journey


def test_plan_env_writes_the_manifests_beside_the_launch_files(tmp_path, capsys):
    ctx = deploy_context(tmp_path, {})
    ctx.group_vars["vfleet_kubernetes"] = {"namespace": "serving", "lws_name": "llama"}
    assert run_journey(Run(ctx, "plan-env", target="lws")) == 0
    printed = capsys.readouterr().out
    assert "==> kubernetes" in printed and "artifacts/prod/lws" in printed
    lws_dir = ctx.artifacts / "lws"
    body = yaml.safe_load((lws_dir / "leaderworkerset-llama.yaml").read_text())
    assert body["metadata"]["namespace"] == "serving"
    container = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    # The deploy's own render values: the model folder, the served name, the extra args.
    assert container["args"][0] == "/srv/models/Llama-3.1-8B-Instruct"
    assert "--enforce-eager" in container["args"]
    assert (ctx.artifacts / "launch" / "endpoints.json").is_file()
    assert "kubernetes" in dict(ctx.timings)


def test_plan_env_without_the_target_writes_no_manifests(tmp_path):
    ctx = deploy_context(tmp_path, {})
    assert run_journey(Run(ctx, "plan-env")) == 0
    assert not (ctx.artifacts / "lws").exists()


def test_bad_kubernetes_inputs_in_group_vars_are_named_in_one_line():
    from pydantic import ValidationError

    from vfleet.documents.deploy import DeployVars
    from vfleet.inputs.files import Document
    from vfleet.inputs.validate import describe

    for bad, needle in (
        ({"image": "bad image"}, "vfleet_kubernetes.image: must be an image reference"),
        ({"imgae": "x"}, "vfleet_kubernetes.imgae: unknown key: did you mean 'image'?"),
        ({"node_selector": ["gpu"]}, "vfleet_kubernetes.node_selector[0]: must be KEY=VALUE"),
    ):
        values = {"vfleet_kubernetes": bad}
        try:
            DeployVars.model_validate(values)
        except ValidationError as exc:
            line = describe(exc, DeployVars, Document(values, "group_vars/all.yml"))
        else:
            raise AssertionError(f"{bad} was accepted")
        assert needle in line and "\n" not in line and line.count(", got ") <= 1, line
