#!/usr/bin/env bash
# Commit latency in one-way delays (D = 150 ms) on local clusters of loopback servers with
# emulated WAN links, for the latency work (speculative execution, DESIGN.md rule 14):
#
#   nets       the four network scenarios, 1 and 8 client threads of 1 transaction each, 1x3
#              and 2x3 (geo: 150 ms +- 20 every hop);
#   exact      every hop exactly 150 ms (no jitter), 1x3 and 2x3: the model's latency;
#   colocated  2x3 with the shard leaders (s0r0, s1r0) 1 ms apart, every other hop 150 ms.
#
# Usage: scripts/latency.sh [nets|exact|colocated|all] (default all)
# LUIGI=path/to/luigi (default target/release/luigi), TAG=name in the results files (default
# "now"), DURATION/WARMUP in seconds, THREADS client threads for "exact" and "colocated"
# (default 1), FAST_PATH=0 to turn off Luigi's fast path, on by
# default (`--fast-path off` for "nets", `[protocol] fast_path = false` in the cluster files of
# "exact" and "colocated"; FAST_PATH=1, the default, writes both explicitly on).
# Results: results/latency-<TAG>-<variant>-<shape>.json.
# The "exact" and "colocated" clusters are started from a cluster file with per-link
# overrides (ports 7400-7405, data under a temporary directory, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
LUIGI=${LUIGI:-target/release/luigi}
TAG=${TAG:-now}
DURATION=${DURATION:-12}
THREADS=${THREADS:-1} # client threads of the "exact" and "colocated" runs
WARMUP=${WARMUP:-2}
what=${1:-all}
common=(--duration "$DURATION" --warmup "$WARMUP" --no-progress --in-flight 1)
FAST_PATH=${FAST_PATH:-1}
fast=(--fast-path on)
if [[ $FAST_PATH == 0 ]]; then fast=(--fast-path off); fi
if ! "$LUIGI" bench micro --help | grep -q -- '--fast-path <on|off>'; then
  # A build from before 2026-11-26: the fast path was a flag, off by default.
  fast=()
  if [[ $FAST_PATH == 1 ]]; then fast=(--fast-path); fi
fi

# A cluster file: $1 shards of 3 replicas, every hop $2 us with jitter 0, and the leaders
# (replica 0 of each shard) $3 us apart.
cluster_file() {
  local shards=$1 hop_us=$2 leaders_us=$3 s r
  local nodes=()
  echo 'net = "geo"'
  echo 'seed = 7'
  echo 'secret = "latency script secret 0123456789"'
  if [[ $FAST_PATH == 0 ]]; then printf '[protocol]\nfast_path = false\n'; else printf '[protocol]\nfast_path = true\n'; fi
  for ((s = 0; s < shards; s++)); do
    echo '[[shards]]'
    echo "replicas = [\"127.0.0.1:$((7400 + 3 * s))\", \"127.0.0.1:$((7401 + 3 * s))\", \"127.0.0.1:$((7402 + 3 * s))\"]"
    for ((r = 0; r < 3; r++)); do nodes+=("s${s}r${r}"); done
  done
  local from to mean
  for from in client "${nodes[@]}"; do
    for to in client "${nodes[@]}"; do
      [[ $from == "$to" || ($from == client && $to == client) ]] && continue
      mean=$hop_us
      if [[ $from == s*r0 && $to == s*r0 ]]; then mean=$leaders_us; fi
      printf '[[links]]\nfrom = "%s"\nto = "%s"\nmean_us = %d\njitter_us = 0\n' "$from" "$to" "$mean"
    done
  done
}

# Runs the micro benchmark against servers started from a cluster file ($1 shards, $2 hop
# delay, $3 leader-to-leader delay), writing $4.
run_file_cluster() {
  local shards=$1 hop_us=$2 leaders_us=$3 json=$4 s r
  local dir
  dir=$(mktemp -d)
  cluster_file "$shards" "$hop_us" "$leaders_us" >"$dir/cluster.toml"
  local pids=()
  for ((s = 0; s < shards; s++)); do
    for ((r = 0; r < 3; r++)); do
      "$LUIGI" server --config "$dir/cluster.toml" --node "s${s}r${r}" --data-dir "$dir/data" \
        >"$dir/s${s}r${r}.log" 2>&1 &
      pids+=($!)
    done
  done
  "$LUIGI" bench micro --cluster "$dir/cluster.toml" --threads "$THREADS" "${common[@]}" --json "$json" || true
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}

if [[ $what == nets || $what == all ]]; then
  for shape in 1x3 2x3; do
    "$LUIGI" bench micro --shards "${shape%x*}" --replicas 3 --threads 1,8 \
      --net same-region,same-continent,cross-continent,geo "${common[@]}" "${fast[@]}" \
      --json "results/latency-$TAG-nets-$shape.json"
  done
fi
if [[ $what == exact || $what == all ]]; then
  run_file_cluster 1 150000 150000 "results/latency-$TAG-exact-1x3.json"
  run_file_cluster 2 150000 150000 "results/latency-$TAG-exact-2x3.json"
fi
if [[ $what == colocated || $what == all ]]; then
  run_file_cluster 2 150000 1000 "results/latency-$TAG-colocated-2x3.json"
fi
