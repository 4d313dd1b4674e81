#!/usr/bin/env bash
# The process-starting tiers under CPU load, several times in a row (issue 24: "a suite that never flakes under
# load"): two busy loops, as `stress --cpu 2` would, while the processes tier runs as scripts/test.sh runs it
# (three pytest-xdist workers, a module each at a time). Every run must pass.
#   scripts/test-loaded.sh [RUNS] [pytest args...]     RUNS defaults to 3; KCLI_LOAD_LOOPS sets the busy loops (2)
# Run scripts/setup.sh (or scripts/test.sh) once first. Exit status: the number of failed runs (0: all passed).
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
shift || true
loops="${KCLI_LOAD_LOOPS:-2}"
unset PYTHONDONTWRITEBYTECODE

busy=()
for _ in $(seq "$loops"); do
  (while :; do :; done) &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT

failed=0
for run in $(seq "$runs"); do
  t0=$SECONDS
  code=0
  .venv/bin/python -m pytest -q -p no:cacheprovider -n "${KCLI_PROCESS_WORKERS:-3}" --dist loadfile \
    -m "(broker_process or cluster or zookeeper) and not spark" "$@" || code=$?
  echo "loaded run $run of $runs: exit $code in $((SECONDS - t0)) s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  [ "$code" = 0 ] || failed=$((failed + 1))
done
exit "$failed"
