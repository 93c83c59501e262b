#!/usr/bin/env bash
# Issue 31's evidence: Luigi's read-only path on and off, alternating, in one session, on
# 2 shards x 3 replicas, with the default clock bound (500 ms) and a tight one (10 ms).
#   geo (default): YCSB B, C and K2 95/5 under `geo` (one-way 150 ms +- 20 ms between any two
#     nodes), and K2 with the client next to one replica of every shard (--client-near).
#   lan: YCSB B, C and K2 95/5, and TPC-C's read-mostly mix (scale 0.1: a tenth of
#     the items, customers and orders), with `--net none`.
#   tpcc-geo: TPC-C's read-mostly mix (scale 0.1) under `geo`, 10 ms bound, the client
#     anywhere and next to the leaders.
#   scans: YCSB E (95 % scans, 5 % inserts), 10 ms bound, with `--net none` and under `geo`.
# Usage: run.sh LUIGI_BINARY OUT_DIR [geo|lan|tpcc-geo|scans]; summarize.py summarizes its output.
set -euo pipefail
BIN=${1:?luigi binary}
OUT=${2:?output directory}
MODE=${3:-geo}
mkdir -p "$OUT"
THREADS=${THREADS:-4}
DURATION=${DURATION:-10}
NET=geo
[ "$MODE" = lan ] && NET=none
run() {
    local name=$1 bench=$2; shift 2
    echo "== $name: $BIN bench $bench $* (load $(cut -d' ' -f1 /proc/loadavg))"
    "$BIN" bench "$bench" --shards 2 --replicas 3 --net "$NET" --threads "$THREADS" --duration "$DURATION" \
        --warmup 3 --no-progress --json "$OUT/$name.json" "$@" 2>&1 | grep -v "^\s*$" || echo "FAILED: $name"
}
if [ "$MODE" = lan ]; then
    for bound in 10000 500000; do
        for w in b c k2-95-5; do
            for path in on off; do
                run "ycsb-$w-bound$bound-$path" ycsb --workload "$w" --read-only-path "$path" --max-clock-offset-us "$bound"
            done
        done
        for path in on off; do
            run "tpcc-read-mostly-bound$bound-$path" tpcc --mix read-mostly --scale 0.1 --read-only-path "$path" \
                --max-clock-offset-us "$bound"
        done
    done
    exit 0
fi
if [ "$MODE" = scans ]; then
    for NET in none geo; do
        for path in on off; do
            run "ycsb-e-$NET-bound10000-$path" ycsb --workload e --read-only-path "$path" --max-clock-offset-us 10000
        done
    done
    exit 0
fi
if [ "$MODE" = tpcc-geo ]; then
    for near in any 0; do
        for path in on off; do
            near_flag=()
            [ "$near" = any ] || near_flag=(--client-near "$near")
            run "tpcc-read-mostly-near$near-bound10000-$path" tpcc --mix read-mostly --scale 0.1 \
                --read-only-path "$path" --max-clock-offset-us 10000 "${near_flag[@]}"
        done
    done
    exit 0
fi
for w in b c k2-95-5; do
    for bound in 500000 10000; do
        for path in on off; do
            run "$w-bound$bound-$path" ycsb --workload "$w" --read-only-path "$path" --max-clock-offset-us "$bound"
        done
    done
done
for near in 0 1; do
    for path in on off; do
        run "k2-95-5-near$near-bound10000-$path" ycsb --workload k2-95-5 --read-only-path "$path" \
            --max-clock-offset-us 10000 --client-near "$near"
    done
done
