#!/usr/bin/env bash
# The README's operator captures: a 2 x 3 loopback cluster (`net = "none"`, fsync) with
# metrics addresses under `luigi bench micro --threads 4`; 12 s in, `curl` of shard 0's
# leader's /metrics and `luigi top --once`; then `kill -9` of that leader and, 2 s later,
# `luigi top --once` again. Writes OUT/{metrics-s0rN.txt,top-before.txt,top-after.txt,
# kill.time,bench.json,bench.out}. Usage: scripts/capture_metrics.sh LUIGI_BINARY OUT_DIR
# (loopback ports 7400-7412 and 9400-9412).
set -euo pipefail
bin=$(realpath "$1"); out=$(realpath -m "$2")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cluster=$work/cluster.toml
{
  echo 'net = "none"'
  echo "secret = \"capture-$(date +%s%N)-a-long-random-string\""
  for s in 0 1; do
    echo '[[shards]]'
    echo "replicas = [\"127.0.0.1:74${s}0\", \"127.0.0.1:74${s}1\", \"127.0.0.1:74${s}2\"]"
    echo "metrics = [\"127.0.0.1:94${s}0\", \"127.0.0.1:94${s}1\", \"127.0.0.1:94${s}2\"]"
  done
} > "$cluster"
declare -A pid
for s in 0 1; do for r in 0 1 2; do
  "$bin" server --config "$cluster" --node "s${s}r${r}" --data-dir "$work/data" > "$work/s${s}r${r}.log" 2>&1 &
  pid[s${s}r${r}]=$!
done; done
trap 'kill "${pid[@]}" 2>/dev/null; rm -rf "$work"' EXIT
sleep 3
"$bin" bench micro --cluster "$cluster" --threads 4 --duration 40 --warmup 2 --json "$out/bench.json" \
  --no-progress > "$out/bench.out" 2>&1 &
bench=$!
sleep 12
leader=""
for r in 0 1 2; do
  if curl -s "http://127.0.0.1:940$r/metrics" | grep -q '^etcd_server_is_leader{.*} 1'; then leader=$r; fi
done
[ -n "$leader" ] || { echo "shard 0 has no leader 12 s in" >&2; exit 1; }
curl -s "http://127.0.0.1:940$leader/metrics" > "$out/metrics-s0r$leader.txt"
"$bin" top --cluster "$cluster" --once > "$out/top-before.txt"
date -u +%T.%N > "$out/kill.time"
kill -9 "${pid[s0r$leader]}"
sleep 2
"$bin" top --cluster "$cluster" --once > "$out/top-after.txt"
wait "$bench"
echo "written to $out (shard 0's leader was s0r$leader)"
