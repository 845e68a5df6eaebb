#!/usr/bin/env bash
# The system packages `make deploy` (local default) and `make test` need, installed when
# missing: systemd-nspawn and debootstrap for the test hosts, iproute2 and nftables for their
# network, ssh, nc and curl to reach them, python3-venv for .venv/. Needs root on Debian 12
# or Ubuntu 22.04/24.04; anything else is refused in one line before anything is installed.
# Usage: scripts/system-packages.sh [--check]   (--check: list what is missing, install nothing)
set -euo pipefail

PACKAGES=(make systemd-container debootstrap iproute2 openssh-client netcat-openbsd curl
  nftables python3-venv)
os_release="${VFLEET_OS_RELEASE:-/etc/os-release}"

refuse() {
  echo "vfleet: error: $*" >&2
  exit 2
}

[[ -r "$os_release" ]] || refuse "cannot read $os_release: run on Debian 12 or Ubuntu 22.04/24.04"
# shellcheck disable=SC1090
id="$(. "$os_release" && echo "${ID:-}")"
version="$(. "$os_release" && echo "${VERSION_ID:-}")"
case "$id $version" in
  "debian 12" | "ubuntu 22.04" | "ubuntu 24.04") ;;
  *) refuse "this machine is ${id:-unknown} ${version:-?}: the test hosts need Debian 12 or Ubuntu 22.04/24.04 (systemd-nspawn, debootstrap); deploy to real hosts with ENV=staging or ENV=prod" ;;
esac

missing=()
for package in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ "${1:-}" == "--check" ]]; then
  echo "missing system packages: ${missing[*]}"
  exit 1
fi
[[ "$(id -u)" == 0 ]] || refuse "missing system packages (${missing[*]}) and not root: run as root (the test hosts are systemd-nspawn machines), e.g. sudo make deploy"
echo "==> installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
