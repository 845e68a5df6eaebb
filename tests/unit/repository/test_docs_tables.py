"""The generated tables of the role and Terraform READMEs (tools/docs_tables.py): the ones in
the repository match their sources, and an edited table, a changed source or missing markers
are reported. Everything runs in process, on the repository or on a copy of a part of it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import hcl2
import pytest

from support.paths import REPO


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_tables", REPO / "tools" / "docs_tables.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_tables"] = module
    spec.loader.exec_module(module)
    return module


docs = _tool()


def copy_into(tmp_path: Path, *parts: str) -> Path:
    """A copy of one file or folder of the repository at the same place under tmp_path."""
    source = REPO.joinpath(*parts)
    target = tmp_path.joinpath(*parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)
    return target


def check(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = docs.main(["--check", "--root", str(root)])
    return code, capsys.readouterr().err


def outside_markers(text: str) -> str:
    """The hand-written part of a README: everything but the generated blocks."""
    return re.sub(r"<!-- BEGIN GENERATED: .*?<!-- END GENERATED: [^>]*-->", "", text, flags=re.S)


def cells(row: str) -> list[str]:
    """A Markdown table row split on its unescaped pipes, as GFM splits it."""
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


# --- the repository ------------------------------------------------------------------------


def test_repository_tables_match_their_sources(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = check(REPO, capsys)
    assert (code, err) == (0, "")


def test_every_readme_with_a_source_has_a_table() -> None:
    readmes = {block.readme.relative_to(REPO).as_posix() for block in docs.all_blocks(REPO)}
    roles = {f"ansible/roles/{path.name}/README.md" for path in docs.roles(REPO)}
    assert roles <= readmes and len(roles) >= 8
    for module in (REPO / "terraform" / "modules").glob("*/variables.tf"):
        assert f"terraform/modules/{module.parent.name}/README.md" in readmes
    assert "terraform/README.md" in readmes


def test_generated_rows_have_the_header_cell_count() -> None:
    """Defaults such as `{{ x | default(y) }}` keep their pipe without splitting the cell."""
    for block in docs.all_blocks(REPO):
        rows = [line for line in block.body.splitlines() if line.startswith("|")]
        assert rows, block.readme
        width = len(cells(rows[0]))
        assert all(len(cells(row)) == width for row in rows), block.readme
    launch = (REPO / "ansible/roles/vllm_launch/README.md").read_text()
    assert r"`{{ vllm_changed \| default(false) }}`" in launch


def test_local_default_named_in_terraform_readme_is_the_envs() -> None:
    with (REPO / "terraform/envs/local/variables.tf").open() as handle:
        variables = {
            label.strip('"'): body
            for block in hcl2.load(handle)["variable"]
            for label, body in block.items()
        }
    profile = variables["profile"]["default"].strip('"')
    count = variables["host_count"]["default"]
    readme = (REPO / "terraform/README.md").read_text()
    assert f"boots {count} test hosts replaying the `{profile}` profile" in readme
    other_profiles = {"h200-1gpu", "h100-sxm-8gpu", "l40s-pcie-8gpu", "gb200-4gpu"} - {profile}
    tree = readme.split("```")[1]
    assert not any(name in tree for name in other_profiles), "the tree names another default"


def test_role_readmes_cite_only_repository_files_or_public_urls() -> None:
    """A document named by file must be in the repository; anything else is cited by URL."""
    for readme in (REPO / "ansible" / "roles").glob("*/README.md"):
        text = re.sub(r"https?://\S+", "", readme.read_text())
        for cited in re.findall(r"[\w./-]+\.md\b", text):
            found = (readme.parent / cited).is_file() or (REPO / cited).is_file()
            assert found, f"{readme.parent.name} cites {cited}, which the repository lacks"
    for name in ("nvidia_driver", "nccl"):
        readme_text = (REPO / "ansible" / "roles" / name / "README.md").read_text()
        assert "https://docs.nvidia.com/" in readme_text


# --- drift is reported, and rewriting repairs it -------------------------------------------


def test_edited_role_table_is_reported_and_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    role = copy_into(tmp_path, "ansible", "roles", "nccl")
    readme = role / "README.md"
    original = readme.read_text()
    edited = original.replace("| `nccl_tests_version` | `str` | no | `2.18.3` |", "| `x` | |", 1)
    assert edited != original
    readme.write_text(edited)

    code, err = check(tmp_path, capsys)
    assert code == 1
    assert "ansible/roles/nccl/README.md: the generated variables table is out of date" in err
    assert readme.read_text() == edited, "--check wrote"

    assert docs.main(["--root", str(tmp_path)]) == 0
    assert readme.read_text() == original
    assert check(tmp_path, capsys) == (0, "")


def test_changed_role_default_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    role = copy_into(tmp_path, "ansible", "roles", "nccl")
    defaults = role / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text().replace('"2.18.3"', '"2.19.0"', 1))

    code, err = check(tmp_path, capsys)
    assert code == 1
    assert "ansible/roles/nccl/README.md: the generated variables table is out of date" in err
    assert "`nccl_tests_version` defaults to '2.19.0' in defaults/main.yml but '2.18.3'" in err


def test_default_missing_from_argument_specs_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    role = copy_into(tmp_path, "ansible", "roles", "firewall")
    defaults = role / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text() + "\nfirewall_undeclared: 1\n")

    code, err = check(tmp_path, capsys)
    assert code == 1
    assert "`firewall_undeclared` is not declared in meta/argument_specs.yml" in err


def test_missing_markers_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    role = copy_into(tmp_path, "ansible", "roles", "vllm")
    readme = role / "README.md"
    readme.write_text(readme.read_text().replace("<!-- END GENERATED: variables -->\n", ""))

    code, err = check(tmp_path, capsys)
    assert code == 1
    assert "ansible/roles/vllm/README.md: needs one `<!-- BEGIN GENERATED: variables -->`" in err
    assert docs.main(["--root", str(tmp_path)]) == 1, "rewriting cannot guess where it goes"


def test_changed_terraform_input_is_reported_and_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = copy_into(tmp_path, "terraform", "modules", "static_inventory")
    variables = module / "variables.tf"
    variables.write_text(variables.read_text().replace('default     = "root"', 'default = "ops"'))
    readme = module / "README.md"
    before = readme.read_text()

    code, err = check(tmp_path, capsys)
    assert code == 1
    assert "terraform/modules/static_inventory/README.md: the generated inputs table" in err

    assert docs.main(["--root", str(tmp_path)]) == 0
    after = readme.read_text()
    assert '| `ssh_user` | `string` | `"ops"` | yes |' in after
    assert outside_markers(after) == outside_markers(before)


def test_local_env_default_follows_variables_tf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_into(tmp_path, "terraform", "README.md")
    variables = copy_into(tmp_path, "terraform", "envs", "local", "variables.tf")
    text = variables.read_text()
    variables.write_text(text.replace('default     = "h200-1gpu"', 'default = "gb200-4gpu"'))

    code, err = check(tmp_path, capsys)
    assert code == 1
    assert "terraform/README.md: the generated local-env table is out of date" in err

    assert docs.main(["--root", str(tmp_path)]) == 0
    readme = (tmp_path / "terraform" / "README.md").read_text()
    assert "boots 2 test hosts replaying the `gb200-4gpu` profile" in readme


# --- cells ---------------------------------------------------------------------------------


def test_cells_escape_pipes_and_angle_brackets_and_cut_long_defaults() -> None:
    assert docs.cell("a | b\n  c") == r"a \| b c"
    assert docs.prose("dir <name>, `keep <this>`") == r"dir \<name>, `keep <this>`"
    long_value = {"key": "x" * 200}
    shown = docs.option_default("v", {}, {"v": long_value})
    assert shown.startswith("`{key: xxx") and shown.endswith("(cut; see `defaults/main.yml`)")
    assert len(shown) < 130
    assert docs.option_default("v", {"required": True}, {}) == "—"
    assert docs.option_default("v", {}, {"v": ""}) == '`""`'
    assert docs.code("a `b`") == "`` a `b` ``"
