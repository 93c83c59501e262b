#!/usr/bin/env bash
# The baselines' evidence (issue: baselines in the same harness): every protocol side by side
# in one run per shape, micro then TPC-C, on 1x1, 1x3, 2x1, 2x3 under the four networks at 1
# and 8 client threads; then the cross-shard study and seed 004's shape. Results go to
# results/baselines-*.json; `luigi bench compare` renders them side by side.
#
# Usage: scripts/baselines.sh [micro|tpcc|cross|seed004|latency|all] (default all)
# LUIGI=path/to/luigi (default: target/release/luigi), DURATION/WARMUP in seconds,
# FAST_PATH=0 to run Luigi without its fast path (on by default since 2026-11-26; the
# README's tables of before were made with it off).
set -euo pipefail
cd "$(dirname "$0")/.."
LUIGI=${LUIGI:-target/release/luigi}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
NETS=same-region,same-continent,cross-continent,geo
PROTOCOLS=luigi,occ,2pl,direct
what=${1:-all}
common=(--duration "$DURATION" --warmup "$WARMUP" --no-progress)
if [[ ${FAST_PATH:-1} == 0 ]] && "$LUIGI" bench micro --help | grep -q -- '--fast-path <on|off>'; then
  common+=(--fast-path off) # an older build has it off already
fi

if [[ $what == micro || $what == all ]]; then
  for shape in 1x1 1x3 2x1 2x3; do
    "$LUIGI" bench micro --shards "${shape%x*}" --replicas "${shape#*x}" --threads 1,8 --net "$NETS" \
      --protocol "$PROTOCOLS" "${common[@]}" --json "results/baselines-micro-$shape.json"
  done
fi
if [[ $what == tpcc || $what == all ]]; then
  for shape in 1x1 1x3 2x1 2x3; do
    "$LUIGI" bench tpcc --shards "${shape%x*}" --replicas "${shape#*x}" --threads 1,8 --net "$NETS" \
      --protocol "$PROTOCOLS" "${common[@]}" --json "results/baselines-tpcc-$shape.json"
  done
fi
if [[ $what == cross || $what == all ]]; then
  for pct in 5 10 15 20; do
    "$LUIGI" bench tpcc --shards 2 --replicas 3 --threads 8 --net geo --mix new-order --remote-item-pct "$pct" \
      --protocol "$PROTOCOLS" "${common[@]}" --json "results/baselines-tpcc-cross-remote$pct.json"
  done
fi
if [[ $what == latency || $what == all ]]; then
  # Unloaded latency in one-way delays: geo (150 ms +- 20 every hop), 8 transactions in flight
  # over 100,000 keys (no contention, no queueing), every shape.
  for shape in 1x1 1x3 2x1 2x3; do
    "$LUIGI" bench micro --shards "${shape%x*}" --replicas "${shape#*x}" --threads 1 --in-flight 8 --net geo \
      --protocol "$PROTOCOLS" --duration 15 --warmup 2 --no-progress --json "results/baselines-latency-$shape.json"
  done
fi
if [[ $what == seed004 || $what == all ]]; then
  # Seed 004: direct RPC against two-phase commit over two databases, on loopback, one client
  # sequential then 10 concurrent clients, each transaction writing one key on each database.
  for threads in 1 10; do
    "$LUIGI" bench micro --shards 2 --replicas 1 --net none --threads "$threads" --in-flight 1 --ops 2 \
      --read-ratio 0 --cross-shard 100 --protocol direct,2pl "${common[@]}" \
      --json "results/baselines-seed004-$threads.json"
  done
fi
if [[ $what == seed004-memory || $what == all ]]; then
  # The same without fsync (the seed's databases kept their data in memory).
  for threads in 1 10; do
    "$LUIGI" bench micro --shards 2 --replicas 1 --net none --threads "$threads" --in-flight 1 --ops 2 \
      --read-ratio 0 --cross-shard 100 --protocol direct,2pl --durability none "${common[@]}" \
      --json "results/baselines-seed004-memory-$threads.json"
  done
fi
if [[ $what == tpcc-long || $what == all ]]; then
  # TPC-C on two shards under geo for longer: a baseline transaction may take several retries
  # of a few WAN round trips each, longer than the matrix's 5 s (a transaction still in flight
  # when the measured interval ends is counted only if it ends rejected or unknown, so starved
  # transactions show as missing commits there, and as aborts after their last retry here).
  for shape in 2x1 2x3; do
    "$LUIGI" bench tpcc --shards "${shape%x*}" --replicas "${shape#*x}" --threads 8 --net geo \
      --protocol "$PROTOCOLS" --duration 30 --warmup 5 --no-progress --json "results/baselines-tpcc-long-$shape.json"
  done
fi
