#!/usr/bin/env bash
# Serve controller-side directories over HTTP to the hosts of a running testbed, the way a
# site's controller serves its wheelhouse and models to air-gapped GPU hosts.
#
# Usage: scripts/testbed-serve.sh --name TESTBED [--port PORT] NAME=DIR [NAME=DIR ...]
#        scripts/testbed-serve.sh --name TESTBED --stop
#
# The test hosts have no route to the root namespace, so the server runs inside the
# testbed's controller namespace (vtb.<name>.ctl, 10.213.0.2 on the hosts' bridge): each
# DIR appears as http://<controller address>:<port>/<NAME>/ (a directory listing, which is
# what `pip --find-links` reads). Prints that base URL. Idempotent: a server already running
# for the same directories and port is kept. `testbed down` ends it with the testbed (it
# kills every process in the testbed's namespaces); --stop ends it earlier. Needs root.
set -euo pipefail

name="" port=8080 stop=0
mounts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) name=${2:?--name needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --stop) stop=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *=*) mounts+=("$1"); shift ;;
    *) echo "testbed-serve: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$name" ]] || { echo "testbed-serve: --name is required (see --help)" >&2; exit 2; }
[[ "$port" =~ ^[0-9]+$ ]] || { echo "testbed-serve: --port must be a number" >&2; exit 2; }
[[ $stop -eq 1 || ${#mounts[@]} -gt 0 ]] || { echo "testbed-serve: give at least one NAME=DIR" >&2; exit 2; }

run_root=${VFLEET_TESTBED_RUN:-/run/vfleet-testbed}
state="$run_root/$name/state.json"
[[ -f "$state" ]] || { echo "testbed-serve: testbed $name is not up (no $state)" >&2; exit 1; }
# The controller namespace and its address, as `testbed up` recorded them.
read -r netns address < <(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(s["controller_netns"], s["controller_address"])' "$state")

serve_dir="$run_root/$name/serve"
pid_file="$serve_dir.pid"
spec_file="$serve_dir.spec"
log_file="$serve_dir.log"

running_pid() {
  # PID of this testbed's server if it is alive and still inside the controller namespace.
  local pid
  pid=$(cat "$pid_file" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  ip netns pids "$netns" 2>/dev/null | grep -qx "$pid" || return 1
  echo "$pid"
}

stop_server() {
  local pid
  if pid=$(running_pid); then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pid_file" "$spec_file"
}

if [[ $stop -eq 1 ]]; then
  stop_server
  rm -rf "$serve_dir"
  exit 0
fi

# The directories, each under its NAME in one served tree (symlinks: nothing is copied).
spec="port=$port"
for m in "${mounts[@]}"; do
  key=${m%%=*} dir=${m#*=}
  [[ "$key" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "testbed-serve: bad NAME '$key'" >&2; exit 2; }
  [[ -d "$dir" ]] || { echo "testbed-serve: $dir is not a directory" >&2; exit 2; }
  spec+=" $key=$(cd "$dir" && pwd -P)"
done
url="http://$address:$port"

if running_pid >/dev/null && [[ "$(cat "$spec_file" 2>/dev/null)" == "$spec" ]]; then
  echo "$url"
  exit 0
fi
stop_server
rm -rf "$serve_dir"
mkdir -p "$serve_dir"
for m in "${mounts[@]}"; do
  ln -s "$(cd "${m#*=}" && pwd -P)" "$serve_dir/${m%%=*}"
done

# Own session (setsid): no terminal, its own process group, not tied to the caller.
setsid ip netns exec "$netns" python3 -m http.server "$port" --bind "$address" \
  --directory "$serve_dir" </dev/null >"$log_file" 2>&1 &
echo $! >"$pid_file"
echo "$spec" >"$spec_file"

for _ in $(seq 100); do
  if ip netns exec "$netns" nc -z -w1 "$address" "$port" 2>/dev/null; then
    echo "$url"
    exit 0
  fi
  running_pid >/dev/null || break
  sleep 0.1
done
echo "testbed-serve: the server did not come up on $url: $(tail -n 3 "$log_file" 2>/dev/null | tr '\n' ' ')" >&2
stop_server
exit 1
