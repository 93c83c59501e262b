#!/usr/bin/env bash
# The digest of every simulated run: runs luigi-sim's tests and 300 seeds of the ignored
# random sweep with LUIGI_SIM_DIGEST set, so that every run appends one line (test, seed,
# events, messages, end time, trace hash), and writes the sorted lines to OUT
# (default: target/trace-digest.txt). Two trees whose digests are identical simulated every
# run identically: a refactor that claims to change no behaviour shows it with
#   scripts/trace_digest.sh /tmp/before.txt   # on the base commit
#   scripts/trace_digest.sh /tmp/after.txt    # on the change
#   diff /tmp/before.txt /tmp/after.txt && echo identical
# SWEEP_SEEDS=n changes the sweep's seed count. A failing test fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/trace-digest.txt}
seeds=${SWEEP_SEEDS:-300}
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
export LUIGI_SIM_DIGEST=$raw
cargo test -p luigi-sim --tests -q
LUIGI_SIM_SWEEP=$seeds cargo test -p luigi-sim --test sweep -q -- --ignored
sort "$raw" > "$out"
echo "$(wc -l < "$out") runs; digest $(sha256sum "$out" | cut -c1-16) in $out"
