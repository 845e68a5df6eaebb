"""Bad input is refused before any host is touched: exit code 2 and one line that says what
is wrong and what to do. Each case breaks one thing in a copy of a real environment
(inventories/prod or local) and checks `vfleet validate`, and `vfleet deploy` itself for a
sample, which must stop before it runs a single command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.cli_run import vfleet
from support.paths import REPO
from vfleet.deploy import pipeline
from vfleet.environment import context, envcheck
from vfleet.errors import UserError

VFLEET = [sys.executable, "-m", "vfleet.cli.main"]


def _copy_env(tmp_path: Path, env: str) -> Path:
    """A repository-shaped tree with a copy of one environment's inventory."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "inventories" / env, root / "inventories" / env)
    (root / "ansible").mkdir(parents=True)
    (root / "ansible" / "roles").symlink_to(REPO / "ansible" / "roles")
    (root / "ansible" / "ansible.cfg").symlink_to(REPO / "ansible" / "ansible.cfg")
    (root / "terraform").mkdir()
    (root / "terraform" / "envs").symlink_to(REPO / "terraform" / "envs")
    shutil.copy2(REPO / "pins.env", root / "pins.env")  # the local group_vars read the pins
    return root


def _edit_yaml(path: Path, change) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _validate(inventory: Path, env: str = "prod", **env_vars: str):
    environ = {k: v for k, v in os.environ.items() if k != "ANSIBLE_VAULT_PASSWORD_FILE"}
    environ.update(env_vars)
    return vfleet("validate", "--env", env, "--inventory", str(inventory), env=environ)


def _refused(out: subprocess.CompletedProcess, needle: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert needle in lines[0], lines[0]


def _group_vars(doc_change):
    return lambda root: _edit_yaml(root / "inventories/prod/group_vars/all.yml", doc_change)


def _hosts(doc_change):
    return lambda root: _edit_yaml(root / "inventories/prod/hosts.yml", doc_change)


def _two_hosts(doc: dict) -> None:
    doc["all"]["children"]["gpu_hosts"] = {
        "hosts": {
            "gpu-01": {
                "ansible_host": "10.0.0.1",
                "vfleet_gpus": 8,
                "vfleet_gpu": "H200-SXM-141GB",
            },
            "gpu-02": {
                "ansible_host": "10.0.0.2",
                "vfleet_gpus": 8,
                "vfleet_gpu": "H200-SXM-141GB",
            },
        }
    }


def _host_var(name: str, value) -> callable:
    def change(doc: dict) -> None:
        _two_hosts(doc)
        doc["all"]["children"]["gpu_hosts"]["hosts"]["gpu-02"][name] = value

    return change


def _host_var_rename(name: str) -> callable:
    def change(doc: dict) -> None:
        _two_hosts(doc)
        hosts = doc["all"]["children"]["gpu_hosts"]["hosts"]
        hosts[name] = hosts.pop("gpu-02")

    return change


def _same_private_address(doc: dict) -> None:
    _two_hosts(doc)
    for hostvars in doc["all"]["children"]["gpu_hosts"]["hosts"].values():
        hostvars["vfleet_private_address"] = "10.1.0.1"


GROUP_VARS_CASES = [
    ("no model", lambda d: d.pop("vfleet_model"), "vfleet_model is not set"),
    (
        "port is a word",
        lambda d: d.update(vfleet_wheelhouse_port="eighty"),
        "vfleet_wheelhouse_port: Input should be a valid integer, got 'eighty'; expected",
    ),
    (
        "port zero",
        lambda d: d.update(vfleet_wheelhouse_port=0),
        "vfleet_wheelhouse_port: Input should be greater than or equal to 1, got 0",
    ),
    (
        "negative context",
        lambda d: d.update(vfleet_plan_overrides={"max_model_len": -5}),
        "vfleet_plan_overrides.max_model_len: Input should be greater than or equal to 1, got -5",
    ),
    (
        "override typo",
        lambda d: d.update(vfleet_plan_overrides={"max_modle_len": 5}),
        "vfleet_plan_overrides.max_modle_len: unknown key: did you mean 'max_model_len'?",
    ),
    (
        "variable typo",
        lambda d: d.update(vfleet_modle="x"),
        "vfleet_modle: unknown vfleet variable: did you mean 'vfleet_model'?",
    ),
    ("old vLLM", lambda d: d.update(vfleet_vllm_version="0.4.0"), "outside the supported range"),
    ("future vLLM", lambda d: d.update(vfleet_vllm_version="0.40.0"), "outside the supported"),
    (
        "version as float",
        lambda d: d.update(vfleet_vllm_version=0.11),
        "vfleet_vllm_version: Input should be a valid string, got 0.11",
    ),
    (
        "kv dtype",
        lambda d: d.update(vfleet_kv_cache_dtype="int4"),
        "vfleet_kv_cache_dtype: Input should be 'auto', 'fp8'",
    ),
    ("unknown GPU", lambda d: d.update(vfleet_expect_gpu="H900"), "unknown GPU 'H900'"),
    (
        "zero GPUs",
        lambda d: d.update(vfleet_expect_gpus_per_host=0),
        "vfleet_expect_gpus_per_host: Input should be greater than or equal to 1, got 0",
    ),
    (
        "negative GPUs",
        lambda d: d.update(vfleet_expect_gpus_per_host=-8),
        "vfleet_expect_gpus_per_host: Input should be greater than or equal to 1, got -8",
    ),
    ("relative model dir", lambda d: d.update(vfleet_model_dir_on_hosts="models/x"), "absolute"),
    (
        "extra arg",
        lambda d: d.update(vfleet_render_extra_args=["enforce-eager"]),
        "vfleet_render_extra_args[0]: must be one `vllm serve` flag starting with --",
    ),
    (
        "engine env",
        lambda d: d.update(vfleet_render_env=["NCCL_DEBUG"]),
        "vfleet_render_env[0]: must be KEY=VALUE (e.g. NCCL_DEBUG=INFO)",
    ),
    ("no workload file", lambda d: d.update(vfleet_workload="mine.yaml"), "neither a preset"),
    ("clear token", lambda d: d.update(vllm_hf_token="hf_abc"), "vllm_hf_token is in clear text"),
    (
        "role bool",
        lambda d: d.update(topology_probe_iperf3="maybe"),
        "topology_probe_iperf3: argument 'topology_probe_iperf3' is of type str and we were "
        "unable to convert to bool",
    ),
    (
        "role int",
        lambda d: d.update(vllm_launch_health_timeout_s="soon"),
        "vllm_launch_health_timeout_s: argument 'vllm_launch_health_timeout_s' is of type str "
        "and we were unable to convert to int: \"'soon'\" cannot be converted to an int "
        "(role vllm_launch): see ansible/roles/vllm_launch/README.md",
    ),
    (
        "role str",
        lambda d: d.update(nvidia_driver_version=["580"]),
        "nvidia_driver_version: argument 'nvidia_driver_version' is of type list and we were "
        "unable to convert to str: a str is one value, not a list (role nvidia_driver)",
    ),
    ("no model dir", lambda d: d.pop("vfleet_model_dir_on_hosts"), "vfleet_model_dir_on_hosts is"),
    (
        "unknown model",
        lambda d: d.update(vfleet_model="acme/NoSuchModel-7B"),
        "vfleet_model: unknown",
    ),
    (
        "ssh source not a network",
        lambda d: d.update(firewall_ssh_sources=["10.0.0.0/33"]),
        "firewall_ssh_sources[0]: must be an IP network in CIDR form",
    ),
    (
        "api source not a network",
        lambda d: d.update(firewall_api_sources=["office"]),
        "firewall_api_sources[0]: must be an IP network in CIDR form",
    ),
    (
        "override block size",
        lambda d: d.update(vfleet_plan_overrides={"block_size": 17}),
        "vfleet_plan_overrides.block_size: must be one of 1, 8, 16, 32, 64, 128, 256, got 17",
    ),
    (
        "override utilization zero",
        lambda d: d.update(vfleet_plan_overrides={"gpu_memory_utilization": 0}),
        "vfleet_plan_overrides.gpu_memory_utilization: Input should be greater than 0",
    ),
    (
        "Hugging Face token by value",
        lambda d: d.update(my_download_auth="hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"),
        "my_download_auth holds what looks like a secret in clear text: vault it",
    ),
    (
        "token wrapped in Jinja",
        lambda d: d.update(vllm_launch_api_key="{{ 'sk-" + "Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1' }}"),
        "vllm_launch_api_key holds what looks like a secret in clear text",
    ),
    (
        "high-entropy string by value",
        lambda d: d.update(extra_env_value="Gk2Rt9Wq4Zp7Lm1Xv8Bn3Hs6Jd5Fc0Ya"),
        "extra_env_value holds what looks like a secret in clear text",
    ),
    (
        "role list items",
        lambda d: d.update(vllm_constraints=[{"torch": "2"}]),
        "vllm_constraints: Elements value for option 'vllm_constraints' is of type dict and we "
        "were unable to convert to str",
    ),
]


@pytest.mark.parametrize(
    ("change", "needle"),
    [pytest.param(c, n, id=i) for i, c, n in GROUP_VARS_CASES],
)
def test_bad_group_vars(tmp_path, change, needle):
    root = _copy_env(tmp_path, "prod")
    _group_vars(change)(root)
    _refused(_validate(root / "inventories/prod"), needle)


INVENTORY_CASES = [
    ("same address twice", _host_var("ansible_host", "10.0.0.1"), "are both 10.0.0.1:22"),
    (
        "port out of range",
        _host_var("ansible_port", 70000),
        "ansible_port: Input should be less than or equal to 65535",
    ),
    (
        "bad address",
        _host_var("ansible_host", "gpu 02!"),
        "ansible_host: must be an IP address or a DNS name",
    ),
    (
        "zero GPUs",
        _host_var("vfleet_gpus", 0),
        "vfleet_gpus: Input should be greater than or equal to 1, got 0",
    ),
    (
        "negative GPUs",
        _host_var("vfleet_gpus", -8),
        "vfleet_gpus: Input should be greater than or equal to 1, got -8",
    ),
    ("unknown GPU", _host_var("vfleet_gpu", "H900"), "host gpu-02: unknown GPU 'H900'"),
    (
        "missing role group",
        lambda d: d["all"]["children"].pop("vllm_launch"),
        "group vllm_launch is missing",
    ),
    (
        "typo in a group",
        lambda d: d["all"]["children"].update(gpu_hosts={"host": {"gpu-01": {}}}),
        "all.children.gpu_hosts.host: unknown key: did you mean 'hosts'?",
    ),
    ("host name with a space", _host_var_rename("gpu 02"), "hosts.gpu 02: must be an RFC 1123"),
    ("host name a path", _host_var_rename("../etc"), "hosts.../etc: must be an RFC 1123 label"),
    (
        "same private address",
        _same_private_address,
        "gpu-01 and gpu-02 both have vfleet_private_address 10.1.0.1",
    ),
    (
        "host var typo",
        _host_var("vfleet_gpuz", 8),
        "gpu_hosts.hosts.gpu-02.vfleet_gpuz: unknown vfleet variable: did you mean",
    ),
    (
        "host firewall source",
        _host_var("firewall_api_sources", ["10.0.0.0/8", "lan"]),
        "firewall_api_sources[1]: must be an IP network in CIDR form",
    ),
    (
        "token in host vars",
        _host_var("vllm_hf_token", "hf_" + "Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3"),
        "vllm_hf_token holds what looks like a secret in clear text",
    ),
    (
        "no all group",
        lambda d: d.update(every=d.pop("all")),
        "hosts.yml line 1: every: unknown key: known keys: all",
    ),
]


@pytest.mark.parametrize(
    ("change", "needle"),
    [pytest.param(c, n, id=i) for i, c, n in INVENTORY_CASES],
)
def test_bad_inventories(tmp_path, change, needle):
    root = _copy_env(tmp_path, "prod")
    _hosts(change)(root)
    _refused(_validate(root / "inventories/prod"), needle)


def test_a_host_listed_twice_is_refused_not_merged(tmp_path):
    root = _copy_env(tmp_path, "prod")
    hosts = root / "inventories/prod/hosts.yml"
    text = hosts.read_text().replace(
        "    gpu_hosts: {}",
        "    gpu_hosts:\n      hosts:\n"
        "        gpu-01: {ansible_host: 10.0.0.1}\n"
        "        gpu-01: {ansible_host: 10.0.0.2}",
    )
    hosts.write_text(text)
    _refused(_validate(root / "inventories/prod"), "'gpu-01' appears twice (lines")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("vfleet_model: [unclosed\n", "fix the YAML"),
        ("- a\n- list\n", "must be a mapping of variable: value"),
        ("vfleet_model: a\nvfleet_model: b\n", "'vfleet_model' appears twice"),
    ],
)
def test_group_vars_that_are_not_a_mapping_of_variables(tmp_path, text, needle):
    root = _copy_env(tmp_path, "prod")
    (root / "inventories/prod/group_vars/all.yml").write_text(text)
    _refused(_validate(root / "inventories/prod"), needle)


VAULTED = (
    "vllm_hf_token: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162636465666768696a6b6c6d6e6f70\n"
)


def test_vaulted_values_need_a_password_source(tmp_path):
    root = _copy_env(tmp_path, "prod")
    (root / "inventories/prod/group_vars/all.yml").open("a").write(VAULTED)
    _refused(_validate(root / "inventories/prod"), "export ANSIBLE_VAULT_PASSWORD_FILE")
    password = tmp_path / "vault-pass"
    password.write_text("not-a-real-password\n")
    password.chmod(0o644)
    out = _validate(root / "inventories/prod", ANSIBLE_VAULT_PASSWORD_FILE=str(password))
    _refused(out, f"chmod 600 {password}")
    password.chmod(0o600)
    out = _validate(root / "inventories/prod", ANSIBLE_VAULT_PASSWORD_FILE=str(password))
    assert out.returncode == 0, out.stderr
    assert "vaulted values yes" in out.stdout


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(vllm_hf_token="{{ lookup('ansible.builtin.file', '/etc/vfleet/hf') }}"),
        lambda d: d.update(vfleet_wheelhouse_port="{{ wheelhouse_port }}"),
        lambda d: d.update(nccl_tests_sha256="e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c"),
        lambda d: d.update(vfleet_served_model_name="meta-llama/Llama-3.1-70B-Instruct-AWQ-INT4"),
        lambda d: d.update(vllm_constraints=["torch==2.13.0+cpu", "transformers==5.19.0"]),
        lambda d: d.update(firewall_api_sources=["10.0.0.0/8", "fd00::/8"]),
    ],
)
def test_templated_paths_and_checksums_are_not_refused(tmp_path, change):
    """The other side of the checks above: values Ansible resolves, checksums, paths and
    model ids pass (no false positives)."""
    root = _copy_env(tmp_path, "prod")
    _group_vars(change)(root)
    out = _validate(root / "inventories/prod")
    assert out.returncode == 0, out.stderr


def test_validate_checks_the_api_key_file_mode(tmp_path):
    root = _copy_env(tmp_path, "prod")
    key = tmp_path / "api-key"
    key.write_text("sk-test\n")
    key.chmod(0o644)
    _group_vars(lambda d: d.update(vfleet_api_key_file=str(key)))(root)
    _refused(_validate(root / "inventories/prod"), f"chmod 600 {key}")
    key.chmod(0o600)
    assert _validate(root / "inventories/prod").returncode == 0


def test_the_shipped_environments_are_valid():
    for env in ("local", "staging", "prod"):
        out = _validate(REPO / "inventories" / env, env=env)
        assert out.returncode == 0, (env, out.stderr)


# ---- deploy stops before it runs anything ----------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (_group_vars(lambda d: d.update(vfleet_vllm_version="0.4.0")), "outside the supported"),
        (
            _hosts(_host_var("vfleet_gpus", 0)),
            "vfleet_gpus: Input should be greater than or equal to 1",
        ),
        (_group_vars(lambda d: d.update(vllm_launch_api_key="sk-123")), "in clear text"),
        (
            _group_vars(
                lambda d: d.update(
                    vfleet_serving_mode="disaggregated", vfleet_api_key_file="/etc/key"
                )
            ),
            "vllm-router 0.1 sends the engines an empty API key",
        ),
    ],
)
def test_deploy_refuses_before_touching_anything(tmp_path, no_commands, change, needle):
    root = _copy_env(tmp_path, "prod")
    change(root)
    with pytest.raises(UserError, match=needle.replace("(", r"\(")):
        pipeline.deploy("prod", root=root)


def test_api_key_file_must_be_private(tmp_path):
    root = _copy_env(tmp_path, "prod")
    key = tmp_path / "api-key"
    key.write_text("sk-test\n")
    key.chmod(0o644)
    _group_vars(lambda d: d.update(vfleet_api_key_file=str(key)))(root)
    with pytest.raises(UserError, match=f"chmod 600 {key}"):
        context.load_context("prod", root=root)
    key.chmod(0o600)
    assert context.load_context("prod", root=root).api_key_file == key
    key.unlink()
    with pytest.raises(UserError, match="does not exist: create it with mode 0600"):
        context.load_context("prod", root=root)


def test_local_default_makes_its_api_key_private(tmp_path):
    root = _copy_env(tmp_path, "local")
    ctx = context.load_context("local", root=root)
    assert ctx.api_key_file == root / ".secrets/local/api-key"
    assert ctx.api_key_file.stat().st_mode & 0o777 == 0o600
    assert len(ctx.api_key_file.read_text().strip()) >= 32
    again = context.load_context("local", root=root)
    assert again.api_key_file.read_text() == ctx.api_key_file.read_text()  # kept, not remade


def test_prod_hosts_must_be_in_the_managed_known_hosts(tmp_path):
    root = _copy_env(tmp_path, "prod")
    _hosts(_two_hosts)(root)
    ctx = context.load_context("prod", root=root)
    with pytest.raises(UserError, match=r"gpu-01 \(10.0.0.1\), gpu-02 \(10.0.0.2\) not in"):
        context.check_hosts(ctx)
    keys = root / "inventories/prod/known_hosts"
    keys.write_text(
        "10.0.0.1 ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIBWGxj1rY0DkGhxqjQ8dFq9oX3X8k1X8nX9uXq2L3tQp\n"
    )
    with pytest.raises(UserError, match=r"^gpu-02 \(10.0.0.2\) not in .*make known-hosts ENV=prod"):
        context.check_hosts(ctx)
    _group_vars(lambda d: d.update(ansible_ssh_common_args="-o StrictHostKeyChecking=no"))(root)
    with pytest.raises(UserError, match="host key checking is off for prod"):
        context.check_hosts(context.load_context("prod", root=root))


def test_prod_with_no_hosts_after_provisioning_is_refused(tmp_path):
    root = _copy_env(tmp_path, "prod")
    ctx = context.load_context("prod", root=root)
    with pytest.raises(UserError, match="no hosts in gpu_hosts"):
        context.check_hosts(ctx)


# ---- facts and plans ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "gpu-01.json line 1: not JSON"),
        (json.dumps([1, 2]), "one JSON object per host"),
    ],
)
def test_malformed_facts_exit_2(tmp_path, content, needle):
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "gpu-01.json").write_text(content)
    out = subprocess.run(
        [*VFLEET, "plan", "--cluster", str(facts), "--model", "meta-llama/Llama-3.1-8B-Instruct"],
        capture_output=True,
        text=True,
        check=False,
    )
    _refused(out, needle)


# ---- probed hardware against the inventory ----------------------------------------------------


def _host(name: str, **hostvars) -> envcheck.Host:
    return envcheck.Host(name, name, 22, "hosts.yml", frozenset({"gpu_hosts"}), hostvars)


def test_a_host_that_lost_a_gpu_is_named():
    nodes = [("gpu-01", "H200-SXM-141GB", 8), ("gpu-02", "H200-SXM-141GB", 7)]
    hosts = [_host("gpu-01", vfleet_gpus=8), _host("gpu-02", vfleet_gpus=8)]
    with pytest.raises(UserError, match="host gpu-02: the probe found 7 GPUs, the inventory"):
        envcheck.check_probed_hardware(nodes, None, None, hosts)
    with pytest.raises(UserError, match="host gpu-02: the probe found 7 GPUs"):
        envcheck.check_probed_hardware(nodes, None, 8, [])
    envcheck.check_probed_hardware(nodes[:1], "NVIDIA H200", 8, hosts)


def test_a_host_with_another_gpu_model_is_named():
    nodes = [("gpu-01", "H100-SXM-80GB", 8)]
    with pytest.raises(UserError, match="found H100-SXM-80GB, the inventory expects H200"):
        envcheck.check_probed_hardware(nodes, "H200-SXM-141GB", None, [])
