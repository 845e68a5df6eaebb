"""What stands between a Kubernetes render and the disk: the schemas (read strictly), the
checks no schema can express, hostile values kept inert, and bad inputs refused in one line
with nothing written."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.lws_cases import CASES, plan_case, render_lws
from support.paths import REPO
from vfleet.errors import UserError
from vfleet.kubernetes import schema_checks
from vfleet.kubernetes.pods import MIN_STARTUP_S, startup_seconds

BY_NAME = {c.name: c for c in CASES}


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    out = {}
    for name in ("dense-single-node", "dp16-ep-two-nodes", "pd-disaggregated"):
        out[name] = plan_case(BY_NAME[name], tmp_path_factory.mktemp(name))
    return out


@pytest.fixture(scope="module")
def golden_lws() -> dict:
    folder = REPO / "tests" / "data" / "lws" / "tp8-pp2-two-nodes"
    return yaml.safe_load(next(folder.glob("leaderworkerset-*.yaml")).read_text())


def _errors(body: dict, strict: bool = True) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema_checks.lws_schema(strict))
    return [e.message for e in validator.iter_errors(body)]


def test_the_golden_leaderworkerset_passes_the_strict_schema(golden_lws: dict) -> None:
    assert _errors(golden_lws) == []


def test_a_misspelt_key_passes_the_crd_as_published_but_not_the_strict_reading(
    golden_lws: dict,
) -> None:
    body = copy.deepcopy(golden_lws)
    container = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resorces"] = container.pop("resources")
    assert _errors(body, strict=False) == []  # the API server would prune it silently
    assert any("'resorces' was unexpected" in e for e in _errors(body))


def test_wrong_types_and_choices_are_refused(golden_lws: dict) -> None:
    body = copy.deepcopy(golden_lws)
    body["spec"]["leaderWorkerTemplate"]["size"] = "two"
    body["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    messages = " ".join(_errors(body))
    assert "'two' is not of type 'integer'" in messages and "'Always' is not one of" in messages


def test_check_jsonschema_agrees_with_the_render(golden_lws: dict, tmp_path: Path) -> None:
    """The same strict schema given to the check-jsonschema CLI: the golden passes, the
    misspelt one fails."""
    schema = tmp_path / "lws-strict.json"
    schema.write_text(json.dumps(schema_checks.lws_schema(True)))
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(golden_lws))
    bad_body = copy.deepcopy(golden_lws)
    bad_body["spec"]["leaderWorkerTemplate"]["sise"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(bad_body))
    cli = [sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema)]
    assert subprocess.run([*cli, str(good)], capture_output=True).returncode == 0
    failed = subprocess.run([*cli, str(bad)], capture_output=True, text=True)
    assert failed.returncode == 1 and "'sise' was unexpected" in failed.stdout


def test_core_kinds_are_checked_by_the_kubernetes_schemas() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": "http"}]},
    }
    text = "---\n" + yaml.safe_dump(service)
    with pytest.raises(UserError, match=r"service\.yaml: spec\.ports\.0\.port: .*Kubernetes 1\.34"):
        schema_checks.validate({"service.yaml": text}, {"service.yaml": service}, "1.34")
    service["spec"] = {"prots": [{"port": 80}]}  # a misspelt key: refused in strict mode
    text = "---\n" + yaml.safe_dump(service)
    with pytest.raises(UserError, match="prots"):
        schema_checks.validate({"service.yaml": text}, {"service.yaml": service}, "1.34")


def test_a_file_that_reads_back_differently_is_refused() -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
    text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\ndata: {}\n"
    with pytest.raises(UserError):
        schema_checks.validate({"c.yaml": text}, {"c.yaml": body}, "1.34")


def test_the_lws_schema_data_is_generated_from_the_vendored_crd() -> None:
    tool = REPO / "controller" / "tools" / "k8s" / "lws_schema.py"
    done = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_startup_seconds_grow_with_the_weights_and_never_fall_under_the_floor() -> None:
    assert startup_seconds(0, 1.0) == MIN_STARTUP_S
    assert startup_seconds(640, 1.0) == 1980  # 687 s read + 300 s warm-up, doubled, to 10 s
    assert startup_seconds(640, 10.0) < startup_seconds(640, 1.0)


HOSTILE_NAME = 'x"; rm -rf / # $(HOME) ${PATH} `id` !!python/object: yes'


def test_hostile_values_stay_inert_in_yaml_and_in_the_shell(
    planned: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    plan, cluster = planned["dp16-ep-two-nodes"]
    out = tmp_path / "lws"
    code, _, err = render_lws(
        plan, cluster, out, "--served-model-name", HOSTILE_NAME,
        "--env", "NCCL_DEBUG=$(VLLM_API_KEY) 'quoted' # not a comment", "--lws-name", "dsv3",
    )  # fmt: skip
    assert code == 0, err
    lws = yaml.safe_load((out / "leaderworkerset-dsv3.yaml").read_text())
    template = lws["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    args = leader["args"]
    # Kubernetes turns $$ into $ and expands $(VAR): the name comes back exactly as given.
    assert args[args.index("--served-model-name") + 1].replace("$$", "$") == HOSTILE_NAME
    env = {e["name"]: e.get("value") for e in leader["env"]}
    assert env["NCCL_DEBUG"] == "$$(VLLM_API_KEY) 'quoted' # not a comment"
    worker = template["workerTemplate"]["spec"]["containers"][0]
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    done = subprocess.run(
        ["/bin/sh", "-c", worker["args"][0].replace("$$", "$")],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "LWS_WORKER_INDEX": "1",
             "LWS_LEADER_ADDRESS": "dsv3-0.dsv3.default"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[lines.index("--served-model-name") + 1] == HOSTILE_NAME.split("\n")[0]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--image", "vllm openai"], "--image"),
        (["--namespace", "Prod"], "--namespace"),
        (["--lws-name", "x" * 41], "--lws-name"),
        (["--shm-size", "1TB"], "--shm-size"),
        (["--node-selector", "gpu"], "--node-selector"),
        (["--rdma-resource", "kubernetes.io/ib"], "--rdma-resource"),
        (["--topology", "a b"], "--topology"),
        (["--topology", "example.com/rack"], "--queue"),
        (["--load-gbps", "0"], "--load-gbps"),
        (["--kubernetes-version", "1.99"], "1.99"),
        (["--router-package", "vllm-router; rm -rf /"], "--router-package"),
        (["--api-key-file", "/etc/vfleet/key"], "--api-key-secret"),
        (["--router-host", "gpu-01"], "Deployment of its own"),
        (["--model-path", "/model"], "the root"),
    ],
)
def test_bad_inputs_get_one_line_and_nothing_written(
    planned: dict[str, tuple[Path, Path]], tmp_path: Path, flags: list[str], needle: str
) -> None:
    plan, cluster = planned["dense-single-node"]
    out = tmp_path / "lws"
    code, _, err = render_lws(plan, cluster, out, *flags)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and not out.exists()


def test_pools_behind_an_api_key_secret_are_refused(
    planned: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """vllm-router 0.1 hands the engines an empty key: keyed pools would answer 401."""
    plan, cluster = planned["pd-disaggregated"]
    out = tmp_path / "lws"
    code, _, err = render_lws(plan, cluster, out, "--api-key-secret", "vllm-key")
    assert code == 2 and "--api-key-secret with prefill/decode pools" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert render_lws(plan, cluster, out)[0] == 0


def test_kueue_labels_each_group_and_pins_it_to_a_topology_domain(
    planned: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    plan, cluster = planned["dp16-ep-two-nodes"]
    out = tmp_path / "lws"
    flags = ["--queue", "gpu-team", "--topology", "example.com/block"]
    flags += ["--exclusive-topology", "example.com/rack"]
    flags += ["--node-selector", "nvidia.com/gpu.product=NVIDIA-H200"]
    code, _, err = render_lws(plan, cluster, out, *flags)
    assert code == 0, err
    body = yaml.safe_load(next(out.glob("leaderworkerset-*.yaml")).read_text())
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-team"
    assert body["metadata"]["annotations"] == {
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "example.com/rack"
    }
    for role in ("leaderTemplate", "workerTemplate"):
        template = body["spec"]["leaderWorkerTemplate"][role]
        annotations = template["metadata"]["annotations"]
        assert annotations == {"kueue.x-k8s.io/podset-required-topology": "example.com/block"}
        assert template["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}


def test_kubernetes_inputs_without_the_target_are_refused(
    planned: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    from support.cli_run import vfleet

    plan, cluster = planned["dense-single-node"]
    done = vfleet("render", "--plan", str(plan), "--cluster", str(cluster),
                  "--out", str(tmp_path / "o"), "--image", "vllm/vllm-openai:v1")  # fmt: skip
    assert done.returncode == 2 and "--target lws" in done.stderr


UNEQUAL_HOSTS = """nodes:
  - {name: gpu-a, address: 10.20.0.11, gpus: 8}
  - {name: gpu-b, address: 10.20.0.12, gpus: 4}
gpu: H200-SXM-141GB
intra_node: {link: nvswitch, busbw_GBps: 450}
inter_node: {fabric: infiniband, busbw_GBps: 350}
"""


def test_a_plan_whose_engine_hosts_differ_is_refused(tmp_path: Path) -> None:
    """An engine on an 8-GPU and a 4-GPU host: LWS has one template for both pods."""
    from support.lws_cases import LwsCase

    case = LwsCase("unequal", UNEQUAL_HOSTS, "Qwen/Qwen3-30B-A3B", "0.32.0", layout="TP4 PP3")
    plan, cluster = plan_case(case, tmp_path)
    code, _, err = render_lws(plan, cluster, tmp_path / "lws")
    assert code == 2 and "LeaderWorkerSet" in err and len(err.strip().splitlines()) == 1, err


def test_a_second_render_replaces_the_first_but_not_foreign_files(
    planned: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    plan, cluster = planned["dense-single-node"]
    out = tmp_path / "lws"
    assert render_lws(plan, cluster, out)[0] == 0
    assert render_lws(plan, cluster, out, "--namespace", "serving")[0] == 0
    assert "namespace: serving" in next(out.glob("leaderworkerset-*.yaml")).read_text()
    (out / "notes.txt").write_text("mine")
    code, _, err = render_lws(plan, cluster, out)
    assert code == 2 and "notes.txt" in err
