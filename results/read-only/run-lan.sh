#!/usr/bin/env bash
# Issue 31's evidence without wide-area delay: YCSB B, C, E (scans) and K2 95/5, and TPC-C's
# read-mostly mix (scale 0.1: a tenth of the items, customers and orders), on 2 shards x 3
# replicas with `--net none`, Luigi's read-only path on and off, alternating, in one session,
# with the default clock bound (500 ms) and a tight one (10 ms).
# Here a snapshot read costs the clock bound and the replicas' marker lag, a read-write one its
# agreement, log record and replication, so the clock bound decides which path wins.
# Usage: run-lan.sh LUIGI_BINARY OUT_DIR
set -euo pipefail
BIN=${1:?luigi binary}
OUT=${2:?output directory}
mkdir -p "$OUT"
THREADS=${THREADS:-4}
DURATION=${DURATION:-10}
run() {
    local name=$1 bench=$2; shift 2
    echo "== $name: $BIN bench $bench $* (load $(cut -d' ' -f1 /proc/loadavg))"
    "$BIN" bench "$bench" --shards 2 --replicas 3 --net none --threads "$THREADS" --duration "$DURATION" \
        --warmup 3 --no-progress --json "$OUT/$name.json" "$@" 2>&1 | grep -v "^\s*$" || echo "FAILED: $name"
}
for bound in 10000 500000; do
    for w in b c e k2-95-5; do
        for path in on off; do
            run "ycsb-$w-bound$bound-$path" ycsb --workload "$w" --read-only-path "$path" --max-clock-offset-us "$bound"
        done
    done
    for path in on off; do
        run "tpcc-read-mostly-bound$bound-$path" tpcc --mix read-mostly --scale 0.1 --read-only-path "$path" \
            --max-clock-offset-us "$bound"
    done
done
