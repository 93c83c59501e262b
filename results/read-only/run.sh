#!/usr/bin/env bash
# Issue 31's evidence: YCSB B, C and K2 95/5 on 2 shards x 3 replicas under `geo` (one-way
# 150 ms +- 20 ms between any two nodes), Luigi's read-only path on and off, alternating, in one
# session; with the default clock bound (500 ms) and a tight one (10 ms); and with the client
# next to one replica of every shard (--client-near). Usage: run.sh LUIGI_BINARY OUT_DIR
set -euo pipefail
BIN=${1:?luigi binary}
OUT=${2:?output directory}
mkdir -p "$OUT"
THREADS=${THREADS:-4}
DURATION=${DURATION:-10}
run() {
    local name=$1; shift
    echo "== $name: $BIN bench ycsb $* (load $(cut -d' ' -f1 /proc/loadavg))"
    "$BIN" bench ycsb --shards 2 --replicas 3 --net geo --threads "$THREADS" --duration "$DURATION" --warmup 3 \
        --no-progress --json "$OUT/$name.json" "$@" 2>&1 | grep -v "^\s*$" || echo "FAILED: $name"
}
for w in b c k2-95-5; do
    for bound in 500000 10000; do
        for path in on off; do
            run "$w-bound$bound-$path" --workload "$w" --read-only-path "$path" --max-clock-offset-us "$bound"
        done
    done
done
for near in 0 1; do
    for path in on off; do
        run "k2-95-5-near$near-bound10000-$path" --workload k2-95-5 --read-only-path "$path" \
            --max-clock-offset-us 10000 --client-near "$near"
    done
done
