#!/usr/bin/env python3
"""Record what each vLLM release reads besides its flags: environment variables, Prometheus
metric names and the fields of the JSON configs vfleet renders.

`vfleet upgrade-check` compares two releases with this record (and with the flag registry,
data/vllm_flags.json) instead of a hand-kept list of renames. The facts come from each
release's own Python source, read with `ast` (nothing is imported or run):

- envs: the keys of `environment_variables` in vllm/envs.py, the variables the release reads
  (one it does not list is ignored by it);
- metrics: every string literal of the form `vllm:<name>` in the package, the names its
  Prometheus loggers register (counters are exported with a `_total` suffix, histograms as
  `_bucket`, `_sum` and `_count`; a name assembled at run time is not seen);
- config_fields: the declared fields of KVTransferConfig, SpeculativeConfig and
  CompilationConfig, the classes `--kv-transfer-config`, `--speculative-config` and
  `--compilation-config` parse their JSON into.

The sources are those scripts/fetch-vllm-sources.sh keeps under $VFLEET_CACHE/vllm-src (each
release's wheel from PyPI, `vllm/**/*.py` only); the script fetches the missing ones.

    .venv/bin/python controller/tools/flag_registry/release_facts.py          # rebuild
    .venv/bin/python controller/tools/flag_registry/release_facts.py --check  # current?
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "controller" / "src" / "vfleet" / "data" / "vllm_release_facts.json"
CACHE = Path(os.environ.get("VFLEET_CACHE", "/var/cache/vfleet")) / "vllm-src"

# The flag registry's releases (0.21.0 has no wheel on PyPI) and the KV oracle's.
RELEASES = (
    "0.8.5.post1", "0.9.2", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0",
    "0.13.0", "0.15.1", "0.17.1", "0.18.1", "0.19.1", "0.20.0", "0.20.2", "0.22.0", "0.23.0",
    "0.25.1", "0.26.0", "0.27.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
)  # fmt: skip
CONFIG_CLASSES = {
    "kv_transfer": "KVTransferConfig",
    "speculative": "SpeculativeConfig",
    "compilation": "CompilationConfig",
}
METRIC = re.compile(r"^vllm:[a-z0-9_]+$")


def _trees(package: Path) -> list[tuple[Path, ast.Module]]:
    """The modules that can hold a metric name or one of the config classes (a text match
    first: parsing all 1,000-2,900 files of a release would take minutes)."""
    wanted = ("vllm:", *(f"class {c}" for c in CONFIG_CLASSES.values()))
    out = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not any(w in text for w in wanted):
            continue
        try:
            out.append((path, ast.parse(text)))
        except SyntaxError:
            continue  # written for a newer Python than this one; reported if a fact is missing
    return out


def envs_of(package: Path) -> list[str]:
    tree = ast.parse((package / "envs.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        value = getattr(node, "value", None)
        if (
            isinstance(target, ast.Name)
            and target.id == "environment_variables"
            and isinstance(value, ast.Dict)
        ):
            return sorted(k.value for k in value.keys if isinstance(k, ast.Constant))
    raise SystemExit(f"{package}/envs.py: no environment_variables dict")


def metrics_of(trees: list[tuple[Path, ast.Module]]) -> list[str]:
    names = set()
    for _, tree in trees:
        for node in ast.walk(tree):
            is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_text and METRIC.match(node.value):
                names.add(node.value)
    return sorted(names)


def config_fields_of(trees: list[tuple[Path, ast.Module]]) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for key, cls in CONFIG_CLASSES.items():
        for path, tree in trees:
            if "config" not in path.as_posix():
                continue
            found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
            if not found:
                continue
            names = []
            for stmt in found[0].body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                name = stmt.target.id
                if name.startswith("_") or "ClassVar" in ast.unparse(stmt.annotation):
                    continue
                names.append(name)
            fields[key] = sorted(names)
            break
        else:
            raise SystemExit(f"no class {cls} in the release's config modules")
    return fields


def facts_of(version: str) -> dict[str, object]:
    package = CACHE / version / "vllm"
    trees = _trees(package)
    return {
        "envs": envs_of(package),
        "metrics": metrics_of(trees),
        "config_fields": config_fields_of(trees),
    }


def build() -> dict[str, object]:
    return {
        "schema": "vfleet.vllm_release_facts/1",
        "generated_by": "controller/tools/flag_registry/release_facts.py",
        "source": "each release's wheel from PyPI (vllm==<version>), vllm/**/*.py read with ast",
        "versions": {v: facts_of(v) for v in RELEASES},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the record is stale")
    args = parser.parse_args()
    missing = [v for v in RELEASES if not (CACHE / v / ".vfleet-complete").is_file()]
    if missing:
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "fetch-vllm-sources.sh"), *missing], check=True
        )
    text = json.dumps(build(), indent=1, sort_keys=True) + "\n"
    if args.check:
        current = OUT.read_text() if OUT.is_file() else ""
        print("current" if current == text else f"stale: rerun {sys.argv[0]}")
        return 0 if current == text else 1
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(RELEASES)} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
