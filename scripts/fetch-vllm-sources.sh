#!/usr/bin/env bash
# Fetch the pure-Python sources of vLLM releases for the KV-planner oracle (tests/support/kv_oracle)
# and the KV-transfer config check (tests/engine/test_kv_transfer_releases.py).
# Usage: scripts/fetch-vllm-sources.sh [VERSION ...]
# Each release lands in $VFLEET_CACHE/vllm-src/<version>/vllm/ (only vllm/**/*.py, 16-70 MB);
# the ~270 MB wheel is deleted at once. A marker written last tells a finished release from a
# half-done one, which is extracted again. Needs only .venv (make setup) and network access.
set -euo pipefail

VFLEET_CACHE="${VFLEET_CACHE:-/var/cache/vfleet}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO_ROOT/.venv"
# The KV oracle's releases (tests/support/kv_oracle/oracle.py) and the KV-transfer config's release
# boundaries (tests/engine/test_kv_transfer_releases.py).
DEFAULT_VERSIONS=(0.9.2 0.10.1.1 0.11.0 0.13.0 0.17.1 0.20.0 0.20.2 0.22.0 0.23.0 0.26.0 0.27.0
  0.31.0 0.33.0)
VERSIONS=("$@")
[[ ${#VERSIONS[@]} -gt 0 ]] || VERSIONS=("${DEFAULT_VERSIONS[@]}")

DEST="$VFLEET_CACHE/vllm-src"
MARKER=.vfleet-complete

if [[ ! -x "$VENV/bin/pip" ]]; then
  echo "fetch-vllm-sources: $VENV/bin/pip missing; run make setup" >&2
  exit 1
fi
mkdir -p "$DEST"
# One fetcher at a time: CI and a developer shell may both run the test targets.
exec 9>"$DEST/.lock"
flock 9
# Under the lock nobody else is fetching, so temp folders left by a killed run can go.
rm -rf "$DEST"/.fetch-*

fetch() {
  # One release: download its wheel into a temp folder, keep vllm/**/*.py, mark it done.
  local version=$1 target="$DEST/$1" start=$SECONDS tmp wheel count
  tmp="$(mktemp -d "$DEST/.fetch-$version.XXXXXX")"
  # Wheel platforms by release: manylinux1 up to 0.11.x, manylinux_2_31 for 0.12-0.19,
  # manylinux_2_35 for 0.20.x, manylinux_2_28 from 0.22 (pip does not widen an explicit
  # --platform to older tags, so each is named). The wheel is read once, so pip's cache
  # would only hold 270 MB more.
  if ! "$VENV/bin/pip" download -q --progress-bar off --no-cache-dir --no-deps \
    --only-binary :all: --python-version 3.12 \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux1_x86_64 \
    "vllm==$version" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    cat "$tmp/pip.log" >&2
    rm -rf "$tmp"
    echo "vllm $version: FAILED (pip download)" >&2
    return 1
  fi
  wheel="$(compgen -G "$tmp/vllm-$version-*.whl" | head -n 1 || true)"
  if [[ -z "$wheel" ]]; then
    rm -rf "$tmp"
    echo "vllm $version: FAILED (no wheel in the download)" >&2
    return 1
  fi
  rm -rf "$target"
  # Python's zipfile, not unzip, which a fresh Debian 12 lacks.
  count="$("$VENV/bin/python" - "$wheel" "$target" <<'EOF'
import sys
import zipfile

wheel, target = sys.argv[1:3]
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(".py")]
    for name in names:
        zf.extract(name, target)
print(len(names))
EOF
)"
  rm -rf "$tmp"
  printf 'vllm==%s files=%s\n' "$version" "$count" >"$target/$MARKER"
  echo "vllm $version: fetched $count files in $((SECONDS - start)) s ($target)"
}

export PIP_DISABLE_PIP_VERSION_CHECK=1
# The releases are independent: fetch the missing ones at once (the downloads wait on the
# network, not on this machine), each in its own temp folder. A killed run leaves only
# .fetch-* folders, which the next run removes under the lock.
pids=()
for version in "${VERSIONS[@]}"; do
  if [[ -f "$DEST/$version/$MARKER" ]]; then
    echo "vllm $version: cached ($DEST/$version)"
    continue
  fi
  fetch "$version" &
  pids+=("$!")
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
exit "$failed"
