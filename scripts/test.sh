#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: installs what the tests need, then runs pytest in tiers
# (tests/tiers.py marks each test by what it starts):
#   in-process   protocol, records, storage, tools, handlers: nothing started (CPU-bound), on two pytest-xdist
#                workers, a test module each at a time: the longest tier, it takes up a core the other tiers
#                leave idle while they wait on what they started
#   processes    kctl broker processes, clusters, ZooKeeper: mostly waiting on what they started (a quiet run: 364
#                CPU-s in 1114 s of module time), so three pytest-xdist workers, a test module each at a time
#                (module fixtures stay whole; each worker starts its own ZooKeeper when a module needs one); with
#                two it was the longest tier by 145 s, the machine idle for most of them
#   spark        a SparkSession, a standalone Spark cluster
# The three tiers run side by side (they share no ports, fixtures or temporary directories); each tier's output
# is shown when it ends, in this order; the exit status is the first failing tier's.
#
# Extra arguments go to every tier's pytest (e.g. scripts/test.sh -q -x). To run one pytest over everything
# instead (e.g. scripts/test.sh tests/tools -k verify), set KCLI_TEST_TIERS=0. KCLI_PROCESS_WORKERS and
# KCLI_INPROCESS_WORKERS set the processes and in-process tiers' workers (default 3 and 2; 0 runs the tier in one
# process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The suite starts kctl and brokers as processes hundreds of times: let them keep compiled bytecode (some machines
# set PYTHONDONTWRITEBYTECODE, which makes every process compile kcli from source again).
unset PYTHONDONTWRITEBYTECODE

if [ "${KCLI_TEST_TIERS:-1}" = 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi

PY=.venv/bin/python
logs="$(mktemp -d "${TMPDIR:-/tmp}/kcli-tiers.XXXXXX")"
started=$SECONDS

# Each tier's wall budget (seconds): past it the tier is interrupted (SIGINT: pytest prints where it was and the
# summary of what ran) and then killed, so a stuck tier shows its output instead of holding CI to its deadline.
budget="${KCLI_TIER_BUDGET:-1800}"

run_tier() {  # name, marker expression, pytest args...
  local name="$1" expr="$2"
  shift 2
  local t0=$SECONDS code=0
  # each tier its own basetemp: two pytest sessions never clean up each other's temporary directories
  timeout --signal=INT --kill-after=60 "$budget" \
    "$PY" -m pytest -m "$expr" -p no:cacheprovider --basetemp="$logs/$name-tmp" --durations=15 "$@" \
    >"$logs/$name.log" 2>&1 || code=$?
  [ "$code" = 5 ] && code=0  # no test selected in this tier (a narrowed run): not a failure
  [ "$code" = 124 ] && echo "tier $name: interrupted after its budget of $budget s (KCLI_TIER_BUDGET)" >>"$logs/$name.log"
  echo "$code" >"$logs/$name.code"
  echo "tier $name: exit $code in $((SECONDS - t0)) s" >>"$logs/$name.log"
}

show() {
  echo "=================================== tier $1 ==================================="
  cat "$logs/$1.log"
}

xdist() {  # workers: pytest-xdist's options, a test module at a time (module fixtures stay whole)
  [ "$1" != 0 ] && echo "-n $1 --dist loadfile"
  return 0
}
# The processes tier's modules in the order tests/conftest.py gives them (the longest first, by the durations in
# tests/module_durations.json) rather than xdist's (the most tests first): the tier ends on short modules.
longest_first() {
  [ "$1" != 0 ] && echo "--no-loadscope-reorder"
  return 0
}
# shellcheck disable=SC2046  # the options split into words on purpose
run_tier in-process "not (broker_process or cluster or zookeeper or spark)" $(xdist "${KCLI_INPROCESS_WORKERS:-2}") "$@" &
in_process=$!
# shellcheck disable=SC2046
run_tier processes "(broker_process or cluster or zookeeper) and not spark" $(xdist "${KCLI_PROCESS_WORKERS:-3}") \
  $(longest_first "${KCLI_PROCESS_WORKERS:-3}") "$@" &
processes=$!
run_tier spark "spark" "$@" &
spark=$!
wait "$in_process" || true
show in-process
wait "$spark" || true
show spark
wait "$processes" || true
show processes

status=0
for tier in in-process processes spark; do
  code="$(cat "$logs/$tier.code")"
  echo "tier $tier: exit $code"
  if [ "$status" = 0 ] && [ "$code" != 0 ]; then status="$code"; fi
done
echo "all tiers: $((SECONDS - started)) s wall"
rm -rf "$logs"
exit "$status"
