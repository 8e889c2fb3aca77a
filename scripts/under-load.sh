#!/bin/bash
# The live (integration) suite under CPU load: BURNERS busy loops (`yes > /dev/null`) run through
# each of RUNS passes of `pytest tests/integration`; a summary line per pass, exit 1 if any failed.
# Usage: scripts/under-load.sh [RUNS] [BURNERS]   (root; make test-under-load runs it with 3 and 2)
set -u
runs=${1:-3}
burners=${2:-2}
cd "$(dirname "$0")/.."
py=.venv/bin/python
mkdir -p .under-load
failed=0
burn=()
stop_burners() { [ ${#burn[@]} -gt 0 ] && kill "${burn[@]}" 2>/dev/null; wait "${burn[@]}" 2>/dev/null; burn=(); }
trap 'stop_burners; exit 130' INT TERM
for i in $(seq 1 "$runs"); do
  for _ in $(seq 1 "$burners"); do yes > /dev/null & burn+=($!); done
  start=$(date +%s)
  LEVELLER_REQUIRE_PRIVILEGED=1 timeout 3600 "$py" -m pytest -q -ra --durations=30 -p no:cacheprovider tests/integration \
    > ".under-load/run$i.log" 2>&1
  rc=$?
  stop_burners
  echo "run $i of $runs, $burners burners: $(tail -n 1 ".under-load/run$i.log") (rc $rc, $(( $(date +%s) - start )) s," \
       "log .under-load/run$i.log)"
  [ "$rc" -eq 0 ] || failed=1
done
exit "$failed"
