"""Write the variable and input tables of the role and Terraform READMEs from their sources.

    python tools/docs_tables.py [--root DIR]           rewrite the tables in place
    python tools/docs_tables.py --check [--root DIR]   exit 1 listing each README that drifted

A role README's table comes from the role's `meta/argument_specs.yml` (entry point `main`)
and `defaults/main.yml`; a Terraform module README's from the `variables.tf` beside it;
`terraform/README.md`'s local env section from `terraform/envs/local/variables.tf`. Each
table sits between two marker comments, and everything outside them is left as written.
`make docs-tables` runs the first form; tests/unit/repository/test_docs_tables.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINT = "main"
# A default longer than this is cut: the table stays readable, defaults/main.yml has it all.
MAX_DEFAULT_CHARS = 72
# Terraform types longer than this show the outer constructors only (`list(object({…}))`).
MAX_TYPE_CHARS = 40
NOTE = (
    "<!-- tools/docs_tables.py writes this table from {sources}; change the source and run"
    " `make docs-tables` instead of editing it here. -->"
)


class DocsError(Exception):
    """A README or source the tables cannot be written from; the message says which."""


@dataclass(frozen=True)
class Block:
    """The generated text of one marked block of one README."""

    readme: Path
    name: str
    body: str


# --- Markdown cells ------------------------------------------------------------------------


def cell(text: str) -> str:
    """Table-cell text: one line, `|` escaped (GFM splits cells on it, even in code spans)."""
    return " ".join(text.split()).replace("|", "\\|")


def prose(text: str) -> str:
    """Plain text for a cell: `<` and `*` escaped outside code spans, so `<name>` shows."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "\\<").replace("*", "\\*")
    return cell("`".join(parts))


def code(text: str) -> str:
    """A code span that survives backticks inside it."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return cell(f"{fence}{pad}{text}{pad}{fence}")


def shorten(text: str, limit: int, note: str) -> str:
    """`text`, or its first `limit` characters and a note that it was cut."""
    if len(text) <= limit:
        return code(text)
    return f"{code(text[:limit] + '…')} {note}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


# --- roles ---------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DocsError(f"{path}: cannot read it as YAML ({exc.__class__.__name__})") from exc


def yaml_flow(value: Any) -> str:
    """A default as the role's YAML would write it, on one line; strings as they are."""
    if isinstance(value, str):
        return value if value else '""'
    text = yaml.safe_dump(
        value, default_flow_style=True, width=10**9, allow_unicode=True, sort_keys=False
    )
    return text.removesuffix("\n").removesuffix("\n...").strip()


def role_options(role: Path) -> dict[str, dict[str, Any]]:
    specs = load_yaml(role / "meta" / "argument_specs.yml")
    try:
        options = specs["argument_specs"][ENTRY_POINT].get("options") or {}
    except (KeyError, TypeError, AttributeError) as exc:
        raise DocsError(f"{role}: meta/argument_specs.yml has no `{ENTRY_POINT}` entry") from exc
    if not isinstance(options, dict):
        raise DocsError(f"{role}: the options of `{ENTRY_POINT}` are not a mapping")
    for name, spec in options.items():
        if spec is None:
            options[name] = {}
        elif not isinstance(spec, dict):
            raise DocsError(f"{role}: the option `{name}` of `{ENTRY_POINT}` is not a mapping")
    return options


def role_defaults(role: Path) -> dict[str, Any]:
    path = role / "defaults" / "main.yml"
    defaults = load_yaml(path) if path.is_file() else {}
    if not isinstance(defaults, dict):
        raise DocsError(f"{path}: not a mapping of variables")
    return defaults


def option_type(spec: dict[str, Any]) -> str:
    kind = str(spec.get("type", "str"))
    elements = spec.get("elements")
    return code(f"{kind} of {elements}" if elements else kind)


def option_description(spec: dict[str, Any]) -> str:
    description = spec.get("description", "")
    if isinstance(description, list):
        description = " ".join(str(line) for line in description)
    text = prose(str(description))
    choices = spec.get("choices")
    if choices:
        listed = ", ".join(code(yaml_flow(choice)) for choice in choices)
        text = f"{text} One of: {listed}.".strip()
    return text


def option_default(name: str, spec: dict[str, Any], defaults: dict[str, Any]) -> str:
    if name in defaults:
        value = defaults[name]
    elif "default" in spec:
        value = spec["default"]
    else:
        return "—"
    return shorten(yaml_flow(value), MAX_DEFAULT_CHARS, "(cut; see `defaults/main.yml`)")


def role_rows(role: Path) -> list[list[str]]:
    options = role_options(role)
    defaults = role_defaults(role)
    return [
        [
            code(name),
            option_type(spec),
            "yes" if spec.get("required") else "no",
            option_default(name, spec, defaults),
            option_description(spec),
        ]
        for name, spec in options.items()
    ]


def role_table(role: Path) -> str:
    header = ["Variable", "Type", "Required", "Default", "Description"]
    note = NOTE.format(sources="meta/argument_specs.yml and defaults/main.yml")
    return "\n".join([note, "", *table(header, role_rows(role))])


def role_source_problems(role: Path, label: str) -> list[str]:
    """Disagreements between the two sources, which no table can show."""
    options = role_options(role)
    defaults = role_defaults(role)
    problems = [
        f"{label}/defaults/main.yml: `{name}` is not declared in meta/argument_specs.yml"
        for name in defaults
        if name not in options
    ]
    for name, spec in options.items():
        declared = spec.get("default", defaults.get(name))
        if name in defaults and declared != defaults[name]:
            problems.append(
                f"{label}: `{name}` defaults to {yaml_flow(defaults[name])!r} in"
                f" defaults/main.yml but {yaml_flow(declared)!r} in meta/argument_specs.yml"
            )
    return problems


def roles(root: Path) -> list[Path]:
    specs = sorted((root / "ansible" / "roles").glob("*/meta/argument_specs.yml"))
    return [spec.parent.parent for spec in specs]


# --- Terraform -----------------------------------------------------------------------------


def hcl_blocks(path: Path, kind: str) -> dict[str, dict[str, Any]]:
    """The labelled blocks of one kind (variable, module) of a .tf file, by label, as
    python-hcl2 reads them."""
    try:
        import hcl2
    except ImportError as exc:
        raise DocsError("python-hcl2 is missing: run `make setup` (controller[ops])") from exc
    try:
        with path.open(encoding="utf-8") as handle:
            parsed = hcl2.load(handle)
    except (OSError, UnicodeDecodeError) as exc:
        raise DocsError(f"{path}: cannot read it ({exc.__class__.__name__})") from exc
    except Exception as exc:  # python-hcl2 raises lark's many parse errors
        raise DocsError(f"{path}: not valid HCL ({exc.__class__.__name__})") from exc
    return {unquote(label): body for block in parsed.get(kind, []) for label, body in block.items()}


def hcl_variables(path: Path) -> dict[str, dict[str, Any]]:
    return hcl_blocks(path, "variable")


def validated_by_modules(env: Path) -> dict[str, str]:
    """The variables an env passes unchanged (`arg = var.NAME`) to a module argument the
    module validates, each with that module's folder: the env relies on the module's
    validation instead of repeating it."""
    covered: dict[str, str] = {}
    for call in hcl_blocks(env / "main.tf", "module").values():
        module = (env / unquote(str(call["source"]))).resolve()
        checked = {
            n for n, b in hcl_variables(module / "variables.tf").items() if b.get("validation")
        }
        for argument, value in call.items():
            passed = re.fullmatch(r"\$\{var\.(\w+)\}", str(value))
            if passed and argument in checked:
                covered[passed.group(1)] = f"modules/{module.name}"
    return covered


def unquote(text: str) -> str:
    """python-hcl2 keeps string literals in their quotes and escapes."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return str(json.loads(text))
        except ValueError:
            return text[1:-1]
    return text


def hcl_expression(value: Any) -> str:
    """A value as HCL writes it: strings keep their quotes, expressions lose `${…}`."""
    if isinstance(value, str):
        if value.startswith("${") and value.endswith("}"):
            return value[2:-1]
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(hcl_expression(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{key} = {hcl_expression(item)}" for key, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    return str(value)


def hcl_type(body: dict[str, Any]) -> str:
    kind = hcl_expression(body.get("type", "any"))
    if len(kind) > MAX_TYPE_CHARS:
        kind = re.sub(r"\{.*\}", "{…}", kind)
    return code(kind)


def input_default(body: dict[str, Any]) -> str:
    if "default" not in body:
        return "required"
    return shorten(hcl_expression(body["default"]), MAX_DEFAULT_CHARS, "(cut)")


def validated(body: dict[str, Any], by_module: str | None) -> str:
    if body.get("validation"):
        return "yes"
    return f"by {by_module}" if by_module else "no"


def input_rows(
    variables: dict[str, dict[str, Any]], by_modules: dict[str, str] | None = None
) -> list[list[str]]:
    return [
        [
            code(name),
            hcl_type(body),
            input_default(body),
            validated(body, (by_modules or {}).get(name)),
            prose(unquote(str(body.get("description", "")))),
        ]
        for name, body in variables.items()
    ]


def inputs_table(variables_tf: Path, sources: str = "variables.tf") -> str:
    header = ["Name", "Type", "Default", "Validated", "Description"]
    env = variables_tf.parent
    by_modules = validated_by_modules(env) if (env / "main.tf").is_file() else {}
    rows = input_rows(hcl_variables(variables_tf), by_modules)
    return "\n".join([NOTE.format(sources=sources), "", *table(header, rows)])


def local_env_section(variables_tf: Path) -> str:
    """The local env's default size, in a sentence, and its inputs."""
    variables = hcl_variables(variables_tf)
    try:
        count = hcl_expression(variables["host_count"]["default"])
        profile = unquote(hcl_expression(variables["profile"]["default"]))
    except KeyError as exc:
        raise DocsError(f"{variables_tf}: host_count and profile need defaults") from exc
    sentence = (
        f"By default `envs/local` boots {count} test hosts replaying the `{profile}` profile"
        " (`host_count` and `profile` below); `-var` or a `terraform.tfvars` file changes them."
    )
    table_text = inputs_table(variables_tf, sources="terraform/envs/local/variables.tf")
    return "\n".join([sentence, "", table_text])


def terraform_blocks(root: Path) -> list[Block]:
    blocks = [
        Block(variables_tf.parent / "README.md", "inputs", inputs_table(variables_tf))
        for variables_tf in sorted((root / "terraform" / "modules").glob("*/variables.tf"))
        if (variables_tf.parent / "README.md").is_file()
    ]
    readme = root / "terraform" / "README.md"
    local_variables = root / "terraform" / "envs" / "local" / "variables.tf"
    if readme.is_file() and local_variables.is_file():
        blocks.append(Block(readme, "local-env", local_env_section(local_variables)))
    return blocks


# --- splicing ------------------------------------------------------------------------------


def markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"


def splice(text: str, block: Block, label: str) -> str:
    """`text` with the lines between `block`'s marker lines replaced by its body."""
    begin, end = markers(block.name)
    lines = text.split("\n")
    begins = [index for index, line in enumerate(lines) if line.strip() == begin]
    ends = [index for index, line in enumerate(lines) if line.strip() == end]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise DocsError(
            f"{label}: needs one `{begin}` line and, below it, one `{end}` line"
            " where the table goes"
        )
    return "\n".join([*lines[: begins[0] + 1], block.body, *lines[ends[0] :]])


def all_blocks(root: Path) -> list[Block]:
    role_blocks = [Block(role / "README.md", "variables", role_table(role)) for role in roles(root)]
    return role_blocks + terraform_blocks(root)


def shown(path: Path, root: Path) -> str:
    """`path` relative to the repository root, as the messages name files."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` in one step: an interrupted run leaves the old README whole."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, path.stat().st_mode & 0o777)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def sync(root: Path, write: bool) -> list[str]:
    """Bring every README's tables up to date (or, without `write`, say which are not)."""
    problems = [
        problem for role in roles(root) for problem in role_source_problems(role, shown(role, root))
    ]
    blocks_found = all_blocks(root)
    if not blocks_found:
        raise DocsError(f"{root}: no role or Terraform README to write tables into")
    by_readme: dict[Path, list[Block]] = {}
    for block in blocks_found:
        by_readme.setdefault(block.readme, []).append(block)
    for readme, blocks in by_readme.items():
        try:
            current = readme.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{shown(readme, root)}: cannot read it ({exc.__class__.__name__})")
            continue
        label = shown(readme, root)
        wanted = current
        try:
            for block in blocks:
                wanted = splice(wanted, block, label)
        except DocsError as exc:
            problems.append(str(exc))
            continue
        if wanted == current:
            continue
        if write:
            write_atomically(readme, wanted)
        else:
            names = ", ".join(block.name for block in blocks)
            problems.append(f"{label}: the generated {names} table is out of date")
    return problems


def default_root() -> Path:
    """The repository, relative to the working directory when inside it: shorter messages."""
    try:
        return REPO_ROOT.relative_to(Path.cwd().resolve())
    except ValueError:
        return REPO_ROOT


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the README tables from their sources.")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    parser.add_argument("--root", type=Path, default=default_root(), help="the repository root")
    args = parser.parse_args(argv)
    try:
        problems = sync(args.root, write=not args.check)
    except DocsError as exc:
        print(f"docs_tables: error: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"docs_tables: {problem}", file=sys.stderr)
    if problems and args.check:
        hint = "fix any source named above, then run `make docs-tables`"
        print(f"docs_tables: {hint}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
