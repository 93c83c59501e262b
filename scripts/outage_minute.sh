#!/usr/bin/env bash
# Issue 26's minute-long outage in the simulator: shard 0 of 4 without a majority for 70 s
# while the other three shards go on at over 2,000 cross-shard commits/s
# (crates/luigi-sim/tests/outage_outcomes.rs::minute_long_outage), run twice: with the
# retention rule (every transaction must commit after the heal), then with main's memory
# before issue 26, the last 2^17 acknowledged outcomes (LUIGI_OUTAGE_FIFO=131072), which
# must stall. About 10 + 8 minutes on a 2-core machine (the test profile is optimized).
#
# Usage: scripts/outage_minute.sh        Results: results/faults/outage-minute.txt (command, commit,
# machine on top). Exits non-zero when either run does not end as it must.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
out=results/faults/outage-minute.txt
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
status=0
run() {
  echo "## $*"
  env "$@" cargo test -p luigi-sim --test outage_outcomes minute -- --ignored --nocapture 2>&1 || status=$?
}
{ run LUIGI_OUTAGE_FIFO=; run LUIGI_OUTAGE_FIFO=131072; } > "$tmp"
{
  results_header "scripts/outage_minute.sh (cargo test -p luigi-sim --test outage_outcomes minute -- --ignored --nocapture, without and with LUIGI_OUTAGE_FIFO=131072)"
  grep -E '^(## |seed |test result)' "$tmp" | cut -c1-2000 || true
  if ((status != 0)); then echo "# FAILED (exit $status):"; tail -40 "$tmp"; fi
} > "$out"
cat "$out"
exit "$status"
