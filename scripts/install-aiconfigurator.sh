#!/usr/bin/env bash
# Install NVIDIA AIConfigurator (CPU-only serving performance model, Apache-2.0; the version
# pins.env names) into its own venv, kept apart from the controller's, for
# bench/plan_vs_aiconfigurator.py.
# Usage: scripts/install-aiconfigurator.sh [VENV_DIR]   (default $VFLEET_CACHE/aic-<version>)
# Idempotent: a finished venv carries a marker and is left alone.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# AIC_VERSION: the one record of the pins.
. "$root/pins.env"
VFLEET_CACHE="${VFLEET_CACHE:-/var/cache/vfleet}"
VENV_DIR="${1:-${AIC_VENV:-$VFLEET_CACHE/aic-$AIC_VERSION}}"
PYTHON="${PYTHON:-python3}"

# The marker holds the versions, so a bump in pins.env forces a reinstall.
READY_TEXT="aiconfigurator==$AIC_VERSION aiconfigurator-core==$AIC_VERSION"
MARKER="$VENV_DIR/.vfleet-ready"

log() { printf '[install-aiconfigurator %(%H:%M:%S)T] %s\n' -1 "$*"; }

ready() {
  [[ -x "$VENV_DIR/bin/python" && -f "$MARKER" ]] || return 1
  [[ "$(cat "$MARKER")" == "$READY_TEXT" ]]
}

if ready; then
  log "ready: $VENV_DIR ($READY_TEXT)"
  exit 0
fi

mkdir -p "$(dirname "$VENV_DIR")"
# Serialise concurrent installs.
exec 9>"$VENV_DIR.lock"
flock 9
if ready; then
  log "ready after waiting for another installer: $VENV_DIR"
  exit 0
fi

# This AIC release wants Python >= 3.11, < 3.14.
"$PYTHON" - <<'EOF' || { log "ERROR: $PYTHON is not Python 3.11-3.13"; exit 1; }
import sys
sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 14) else 1)
EOF

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

specs=("aiconfigurator==$AIC_VERSION" "aiconfigurator-core==$AIC_VERSION")
# A wheelhouse under the cache lets a second machine (or a rebuilt venv) install offline.
wheels="$PIP_CACHE_DIR/wheelhouse"
install_offline() {
  "${PIP[@]}" install -q --progress-bar off --no-index --find-links "$wheels" "${specs[@]}"
}
log "pip install ${specs[*]} from the wheelhouse $wheels"
if ! install_offline 2>/dev/null; then
  log "wheelhouse incomplete: pip download (about 30 s)"
  "${PIP[@]}" download -q --progress-bar off -d "$wheels" "${specs[@]}"
  log "pip install ($((SECONDS - start)) s so far)"
  install_offline
fi
log "pip install done after $((SECONDS - start)) s"

# Check the versions through metadata, then that the estimator API imports.
"$VENV_DIR/bin/python" - "$AIC_VERSION" <<'EOF'
import sys
from importlib.metadata import version

want = sys.argv[1]
bad = {n: version(n) for n in ("aiconfigurator", "aiconfigurator-core") if version(n) != want}
if bad:
    sys.exit(f"unexpected versions: {bad}")
from aiconfigurator.cli.api import cli_estimate  # noqa: F401
EOF

printf '%s\n' "$READY_TEXT" >"$MARKER"
log "ready: $VENV_DIR in $((SECONDS - start)) s ($(du -sh "$VENV_DIR" | cut -f1))"
