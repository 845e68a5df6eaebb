#!/usr/bin/env bash
# `make test`'s tiers, each timed, with a table of their wall times and results at the end.
#
# Usage: scripts/test-tiers.sh             the whole suite (below)
#        scripts/test-tiers.sh TIER...     only these tiers, one after another
# Tiers: prepare, unit, engine, testbed, e2e, molecule.
#
# The whole suite: `prepare` (lint, the vLLM CPU venv, the oracle's release sources, the
# test-host image and the tiny models, side by side), then `unit` on every core, then two
# lanes at once: `engine`, `testbed` (the test hosts' own tests) and `molecule` in one, and
# `e2e` (the deploy scenarios, one shared deployment: the longest chain) followed by
# `molecule` in the other. The two molecule tiers share one queue of
# roles (scripts/molecule-all.sh, VFLEET_MOLECULE_CLAIMS): the first lane starts on it long
# before the deploy scenarios are done, and the e2e lane takes what is left. Each lane keeps
# one core busy most of the time (an engine on the CPU, an install, Ansible), so on two
# cores the lanes overlap instead of waiting on each other. They share nothing they write:
# the engine tests run their servers on loopback, each testbed (the deployment's, each
# testbed test's, each molecule scenario's) has its own name and network namespaces, and what both read (the venv, the wheelhouse, the image, the
# tiny models) is built by `prepare` first. VFLEET_TEST_LANES=1 runs them one after another.
#
# A failed tier does not stop the others (one run reports every failure), but the script exits
# non-zero if any failed. A failed `prepare` stops everything: the tiers need what it builds.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
venv=${VENV:-$PWD/.venv}
# The fast tier's workers: its tests are independent (tmp_path each, no hosts, no engine);
# pytest-xdist's `auto` is one per core.
workers=${VFLEET_TEST_WORKERS:-auto}
pytest=("$venv/bin/pytest" -q --durations=25)
results=$(mktemp -d)
# The molecule queue both lanes take roles from (used only when the lanes run side by side).
claims=$(mktemp -d)
trap 'rm -rf "$results" "$claims"' EXIT

# VFLEET_TEST_CPU=1 also counts each tier's CPU seconds: its processes and all they start,
# test hosts and engines included, in a cgroup of its own (cgroup v1 cpuacct, else v2). On a
# machine both lanes keep busy a tier's wall time is its share of the machine; its CPU
# seconds are its work, which is what a cut must take away. Off by default (root only).
cpu_root=""
if [ "${VFLEET_TEST_CPU:-0}" = 1 ]; then
  if [ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then
    cpu_root=/sys/fs/cgroup/cpuacct/vfleet-tests
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cpu_root=/sys/fs/cgroup/vfleet-tests
  fi
  mkdir -p "$cpu_root" 2>/dev/null || cpu_root=""
  [ -n "$cpu_root" ] || echo "test-tiers: no writable cgroup here; CPU seconds not counted" >&2
fi
tier_cgroup=""

cpu_seconds() {
  if [ -f "$1/cpuacct.usage" ]; then
    echo $(($(cat "$1/cpuacct.usage") / 1000000000))
  else
    awk '/^usage_usec/ {print int($2 / 1000000)}' "$1/cpu.stat"
  fi
}

run_tier() {
  if [ -n "$tier_cgroup" ]; then
    echo "$BASHPID" >"$tier_cgroup/cgroup.procs"
  fi
  case $1 in
    prepare)
      make --no-print-directory -j4 -Oline lint engine oracle-sources testbed-image tiny-models
      ;;
    unit) "${pytest[@]}" -n "$workers" -m "not engine and not testbed" tests ;;
    engine) "${pytest[@]}" -m "engine" tests ;;
    testbed) "${pytest[@]}" -m "testbed and not engine" --ignore=tests/e2e tests ;;
    e2e) "${pytest[@]}" -m testbed tests/e2e ;;
    molecule) bash scripts/molecule-all.sh ;;
    molecule-shared) VFLEET_MOLECULE_CLAIMS=$claims bash scripts/molecule-all.sh ;;
    *)
      echo "test-tiers: unknown tier '$1' (prepare, unit, engine, testbed, e2e, molecule)" >&2
      return 2
      ;;
  esac
}

# Runs one tier, its lines prefixed with its name when lanes run side by side, and records
# "<order> PASS|FAIL <tier> <seconds> <exit> <CPU seconds or ->" for the summary.
timed_tier() {
  local order=$1 tier=$2 prefix=$3 start rc cpu=-
  start=$SECONDS
  echo "=== tier: $tier"
  tier_cgroup=""
  if [ -n "$cpu_root" ] && mkdir -p "$cpu_root/$order-$tier"; then
    tier_cgroup=$cpu_root/$order-$tier
  fi
  # A copy of the tier's output is kept so the summary can repeat what failed: CI shows only
  # the end of a long log, and the failures of a tier that ran beside another scroll away.
  if [ -n "$prefix" ]; then
    run_tier "$tier" 2>&1 | tee "$results/$order.log" | sed -u "s/^/[$tier, $prefix] /"
    rc=${PIPESTATUS[0]}
  else
    run_tier "$tier" 2>&1 | tee "$results/$order.log"
    rc=${PIPESTATUS[0]}
  fi
  if [ -n "$tier_cgroup" ]; then
    cpu=$(cpu_seconds "$tier_cgroup")
    rmdir "$tier_cgroup" 2>/dev/null || true # kept while a process of the tier lives on
  fi
  echo "$order $([ "$rc" -eq 0 ] && echo PASS || echo FAIL) $tier $((SECONDS - start)) $rc $cpu" \
    >"$results/$order"
  return "$rc"
}

total_start=$SECONDS
if [ $# -gt 0 ]; then
  n=0
  for tier in "$@"; do
    n=$((n + 1))
    timed_tier "$n" "$tier" ""
  done
else
  if timed_tier 1 prepare ""; then
    timed_tier 2 unit ""
    if [ "${VFLEET_TEST_LANES:-2}" = 1 ]; then
      timed_tier 3 engine ""
      timed_tier 4 molecule ""
      timed_tier 5 testbed ""
      timed_tier 6 e2e ""
    else
      (
        timed_tier 3 engine "lane 1"
        timed_tier 4 testbed "lane 1"
        timed_tier 5 molecule-shared "lane 1"
      ) &
      lane1=$!
      timed_tier 6 e2e "lane 2"
      timed_tier 7 molecule-shared "lane 2"
      wait "$lane1"
    fi
  else
    echo "test-tiers: the preparation failed; the test tiers need what it builds" >&2
  fi
fi
total=$((SECONDS - total_start))

failed=0
echo "=== make test: each tier's wall time"
for file in $(ls "$results" | grep -v '\.log$' | sort -n); do
  read -r _ verdict tier took rc cpu <"$results/$file"
  work=""
  [ "${cpu:--}" = - ] || work="  CPU $cpu s"
  if [ "$verdict" = PASS ]; then
    printf 'PASS  %-16s %5d s  (%d min %02d s)%s\n' "$tier" "$took" $((took / 60)) $((took % 60)) "$work"
  else
    printf 'FAIL  %-16s %5d s  (exit %d)%s\n' "$tier" "$took" "$rc" "$work"
    failed=1
  fi
done
printf 'wall                   %5d s  (%d min %02d s)\n' "$total" $((total / 60)) $((total % 60))
if [ $# -eq 0 ] && [ "${VFLEET_TEST_LANES:-2}" != 1 ]; then
  echo "(engine, testbed and molecule ran beside e2e then molecule, the two molecule tiers"
  echo " taking roles from one queue: the wall time is less than the sum)"
fi
# What failed, tier by tier: pytest's short summary lines and molecule's FAIL lines.
for file in $(ls "$results" | grep -v '\.log$' | sort -n); do
  read -r _ verdict tier _ _ <"$results/$file"
  [ "$verdict" = FAIL ] || continue
  echo "=== $tier: what failed"
  log=$results/$file.log
  if grep -qE '^(FAILED|ERROR|FAIL) ' "$log"; then
    grep -E '^E  ' "$log" | tail -n 20
    grep -E '^(FAILED|ERROR|FAIL) ' "$log"
  else
    tail -n 30 "$log"
  fi
done
[ "$(ls "$results" | grep -vc '\.log$')" -gt 0 ] || failed=1
exit "$failed"
