#!/bin/bash
# usage: stage.sh BIN THREADS [bench args]: 2x3 geo cluster from cluster.toml beside it, one bench run,
# the bench's server-side deltas and the leaders' bump causes.
B=$1; T=$2; shift 2
cd "$(dirname "$0")"; rm -rf data; mkdir -p data   # run from a copy of this folder
pids=()
for s in 0 1; do for r in 0 1 2; do
  $B server --config cluster.toml --node s${s}r${r} --data-dir data > data/s${s}r${r}.log 2>&1 &
  pids+=($!)
done; done
sleep 3
J=/tmp/stage-$T-$$.json
$B bench micro --cluster cluster.toml --threads $T --in-flight 200 --duration 10 --warmup 2 --json $J --no-progress "$@" > /tmp/stage.out 2>&1
for s in 0 1; do for r in 0 1 2; do curl -s http://127.0.0.1:93$s$r/metrics > data/m-s${s}r${r}.txt; done; done
kill ${pids[@]}; wait 2>/dev/null
python3 - "$J" "$T" "$*" <<'PY'
import json, sys, glob, re
r=json.load(open(sys.argv[1]))[0]; T=sys.argv[2]
sm=r.get('server_metrics') or {}
c=sm.get('committed',0) or 1
lat=r['latency_us']
print(f"t{T} {sys.argv[3]}: {r['throughput_tps']:.0f} tx/s, avg {lat['avg']/1000:.0f} ms p50 {lat['p50']/1000:.0f} p99 {lat['p99']/1000:.0f}; fast {r['fast_path_rate']:.3f} asked {r['fast_path_asked_rate']:.3f} 2nd-round {r['second_round_rate']:.3f}")
print(f"   servers: committed {c:.0f} (per shard-commit:) hold {1000*sm.get('hold_s',0)/c:.1f} ms, commit-log mean {1000*sm.get('commit_log_s',0)/max(sm.get('commit_logs',1),1):.1f} ms/batch, fsync {1e6*sm.get('fsync_s',0)/c:.0f} us, rounds {sm.get('agreement_rounds')}")
tot={}
for f in glob.glob('data/m-*.txt'):
    for l in open(f):
        m=re.match(r'luigi_transactions_total\{.*outcome="admitted",path="(\w+)"\} (\d+)', l)
        if m: tot[m.group(1)]=tot.get(m.group(1),0)+int(m.group(2))
print("   admissions (whole run, both leaders):", tot)
fast={}; acc={}
for f in glob.glob('data/m-*.txt'):
    for l in open(f):
        m=re.match(r'luigi_transactions_total\{.*outcome="fast_path",path="(\w+)"\} (\d+)', l)
        if m: fast[m.group(1)]=fast.get(m.group(1),0)+int(m.group(2))
        m=re.match(r'luigi_fast_accepts_total\{.*outcome="(\w+)"\} (\d+)', l)
        if m: acc[m.group(1)]=acc.get(m.group(1),0)+int(m.group(2))
if fast or acc:
    print("   fast path (whole run): leaders", fast, "followers", acc)
PY
