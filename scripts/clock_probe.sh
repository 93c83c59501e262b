#!/usr/bin/env bash
# The +1 h client probe of issue 26, on real processes: a command-line client whose clock runs
# an hour ahead (`--clock-offset-us 3600000000`) against a 1x1 shard it is then restarted, and
# against a 1x3 shard whose leader is then killed (and restarted). Every `luigi put/get` prints
# its exit code and latency. The steps are the process test `crates/luigi/tests/clock_skew.rs`,
# run with its output kept.
#
# Usage: scripts/clock_probe.sh            Results: results/clock-probe/clock-probe.txt (command, commit,
# machine on top). Exits non-zero when the test fails (and says so in the file).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
out=results/clock-probe/clock-probe.txt
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
status=0
cargo test -p luigi --test clock_skew -- --nocapture --test-threads 1 > "$tmp" 2>&1 || status=$?
{
  results_header "scripts/clock_probe.sh (cargo test -p luigi --test clock_skew -- --nocapture --test-threads 1; debug build, loopback)"
  echo "# exit codes: 0 done, 1 not found, 2 refused (nothing done), 3 outcome unknown"
  grep -E '^(luigi |test |running|test result)' "$tmp" || true
  if ((status != 0)); then echo "# FAILED (exit $status):"; tail -40 "$tmp"; fi
} > "$out"
cat "$out"
exit "$status"
