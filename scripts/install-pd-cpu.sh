#!/usr/bin/env bash
# Install what a prefill/decode pair of vLLM CPU engines needs beside the vLLM CPU build: NIXL
# (its Python package and libraries, put on the engines' PYTHONPATH) and vllm-router (its own
# small venv), at the versions pins.env names.
# Usage: scripts/install-pd-cpu.sh [DIR]   (default $VFLEET_CACHE/pd-cpu-<nixl>-<router>)
# Idempotent: a finished DIR carries a marker with the versions and is left alone.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/pins.env"
VFLEET_CACHE="${VFLEET_CACHE:-/var/cache/vfleet}"
DIR="${1:-$VFLEET_CACHE/pd-cpu-$NIXL_VERSION-$VLLM_ROUTER_VERSION}"
PYTHON="${PYTHON:-python3}"
READY_TEXT="nixl==$NIXL_VERSION vllm-router==$VLLM_ROUTER_VERSION"
MARKER="$DIR/.vfleet-ready"

if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$READY_TEXT" ]]; then
  echo "install-pd-cpu: $DIR is ready ($READY_TEXT)"
  exit 0
fi
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9
# Built in place (a venv records its own path) and marked last, so a half-done DIR is redone.
rm -rf "$DIR"
mkdir -p "$DIR"
"$PYTHON" -m venv "$DIR/router"
"$DIR/router/bin/pip" install -q --disable-pip-version-check "vllm-router==$VLLM_ROUTER_VERSION"
# With the router venv's pip (a fresh machine's system python may have none). No
# dependencies: the engines bring torch and numpy; the meta-package `nixl` picks the CUDA
# build it finds, and its CUDA 12 build's UCX needs no GPU for host memory over TCP.
"$DIR/router/bin/pip" install -q --disable-pip-version-check --no-deps --target "$DIR/nixl" \
  "nixl==$NIXL_VERSION" "nixl-cu12==$NIXL_VERSION"
echo "$READY_TEXT" >"$MARKER"
echo "install-pd-cpu: installed $READY_TEXT into $DIR"
