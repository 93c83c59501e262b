#!/bin/bash
# Snapshot catch-up under TPC-C load (issue 11 part 4), from the repository root after
# `cargo build --release --bin luigi`:
#
#   WAREHOUSES=3 PORT0=7491 scripts/snapshot-catchup.sh with 20000 1
#   WAREHOUSES=3 PORT0=7501 scripts/snapshot-catchup.sh without 10000000 0
#
# Usage: snapshot-catchup.sh NAME SNAPSHOT_ENTRIES KILL(0|1)
# 1 shard x 3 replicas on loopback hosting WAREHOUSES TPC-C warehouses (scale 1.0; 3 make a
# snapshot image of about 230 MB), fsync, snapshots every SNAPSHOT_ENTRIES records; a 60 s
# measured TPC-C load with 2 client threads (200 in flight each). With KILL=1, follower s0r2
# is killed (-9) 8 s after the leader serves and restarted 12 s later, when the leader has
# compacted past it: it catches up through the leader's snapshot, sent in chunks. Output in
# $OUT/NAME (default /tmp/snapshot-catchup): the servers' logs, bench.out, r.json, events.txt.
set -u
NAME=$1; ENTRIES=$2; KILL=$3
LUIGI=$(realpath ${LUIGI:-target/release/luigi})
D=${OUT:-/tmp/snapshot-catchup}/$NAME; rm -rf $D; mkdir -p $D; cd $D
P0=${PORT0:-7411}; P1=$((P0+1)); P2=$((P0+2))
cat > c.toml <<T
net = "none"
secret = "snapshot-catchup-experiment-secret"
[protocol]
snapshot_entries = $ENTRIES
election_timeout_us = ${ELECTION_US:-1000000}
[[shards]]
replicas = ["127.0.0.1:$P0", "127.0.0.1:$P1", "127.0.0.1:$P2"]
[workload]
kind = "tpcc"
warehouses = ${WAREHOUSES:-2}
T
for r in 0 1 2; do
  RUST_LOG=info $LUIGI server --config c.toml --node s0r$r --data-dir data --exit-on-stdin-eof < <(sleep 100000) > s$r.log 2>&1 &
  echo $! > s$r.pid
done
# the bench connects to running servers: wait until every replica has built its state
for i in $(seq 1 300); do [ $(cat s0.log s1.log s2.log | grep -c populated) -ge 3 ] && break; sleep 0.1; done
$LUIGI bench tpcc --cluster c.toml --threads 2 --warmup 5 --duration 60 --no-progress --json r.json > bench.out 2>&1 &
BENCH=$!
if [ "$KILL" = 1 ]; then
  # ready (population + election) takes a few seconds; the kill lands ~10 s into the measurement
  for i in $(seq 1 200); do grep -q "serving as the shard leader" s0.log && break; sleep 0.1; done
  sleep 8
  kill -9 $(cat s2.pid); echo "killed s0r2 at $(date +%T.%N)" >> events.txt
  sleep 12
  RUST_LOG=info $LUIGI server --config c.toml --node s0r2 --data-dir data --exit-on-stdin-eof < <(sleep 100000) >> s2.log 2>&1 &
  echo $! > s2.pid; echo "restarted s0r2 at $(date +%T.%N)" >> events.txt
fi
wait $BENCH; echo "bench exit $?" >> events.txt
for r in 0 1 2; do kill $(cat s$r.pid) 2>/dev/null; done
sleep 1
