#!/usr/bin/env bash
# Server memory under command-line clients (issue 26): every `luigi put` is a fresh client
# that runs one transaction and exits without acknowledging its answer. Starts a 1 shard x 3
# replica cluster on loopback (ports PORT..PORT+2, fsync, data under a temporary directory),
# runs N puts one after the other (keys k0..k(N-1), 100-byte values), and samples every
# replica's resident memory every STEP puts and at the end, then once more after IDLE
# seconds with no client at all.
#
# Usage: scripts/cli_memory.sh   N=10000 STEP=1000 IDLE=0 PORT=7460 LUIGI=target/debug/luigi TAG=now
# Results: results/resources/cli-memory-<TAG>.txt, with the command, commit and machine.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
LUIGI=${LUIGI:-target/debug/luigi}
N=${N:-10000}
STEP=${STEP:-1000}
IDLE=${IDLE:-0}
TAG=${TAG:-now}
PORT=${PORT:-7460}
out="results/resources/cli-memory-${TAG}.txt"
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
cat > "$dir/cluster.toml" <<EOF
net = "none"
[[shards]]
replicas = ["127.0.0.1:$PORT", "127.0.0.1:$((PORT + 1))", "127.0.0.1:$((PORT + 2))"]
EOF
pids=()
for r in 0 1 2; do
  "$LUIGI" server --config "$dir/cluster.toml" --node "s0r$r" --data-dir "$dir/data" \
    < /dev/null 2>> "$dir/servers.log" &
  pids+=($!)
done
rss() {
  local line="" p
  for p in "${pids[@]}"; do line+=" $(awk '/^VmRSS/ {print $2}' "/proc/$p/status")"; done
  echo "$line  answers:$(answers)"
}
# Answers kept and clients with a table on each replica, from `luigi status --json` (a build
# before 2026-11-26 does not report them: "-").
answers() {
  local json kept clients
  json=$("$LUIGI" status --json --cluster "$dir/cluster.toml" 2>/dev/null || true)
  kept=$(grep -o '"answers":[0-9]*' <<< "$json" | cut -d: -f2 | tr '\n' ' ')
  clients=$(grep -o '"answer_clients":[0-9]*' <<< "$json" | cut -d: -f2 | tr '\n' ' ')
  echo " ${kept:--} / ${clients:--}"
}
{
  results_header "scripts/cli_memory.sh N=$N STEP=$STEP IDLE=$IDLE PORT=$PORT LUIGI=$LUIGI"
  echo "# puts  seconds  rss_kib(s0r0 s0r1 s0r2)  answers(s0r0 s0r1 s0r2) / clients(same)"
} > "$out"
start=$(date +%s)
until "$LUIGI" put warm up --cluster "$dir/cluster.toml" --timeout 5 > /dev/null 2>&1; do sleep 0.2; done
echo "0 0 $(rss)" >> "$out"
failed=0
for ((i = 1; i <= N; i++)); do
  "$LUIGI" put "k$i" "$(printf 'v%099d' "$i")" --cluster "$dir/cluster.toml" > /dev/null 2>&1 || failed=$((failed + 1))
  if ((i % STEP == 0)); then echo "$i $(($(date +%s) - start)) $(rss)" >> "$out"; fi
done
if ((IDLE > 0)); then
  sleep "$IDLE"
  echo "$N $(($(date +%s) - start)) $(rss)  # after ${IDLE} s idle" >> "$out"
fi
echo "# failed puts: $failed" >> "$out"
cat "$out"
if ((failed > 0)); then exit 1; fi
