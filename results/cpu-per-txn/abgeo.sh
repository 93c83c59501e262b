#!/bin/bash
# usage: abgeo.sh OUT ROUNDS "T T ..." NAME...: 2x3 `geo` micro runs, 200 in flight per thread, alternating the builds
# ${BIN_DIR:-/work/bin}/luigi-NAME; one line per run appended to OUT (latency, fast share, CPU per transaction).
out=$1; rounds=$2; threads=$3; shift 3
echo "# $(date -u +%FT%TZ) abgeo.sh rounds=$rounds threads=$threads bins=$* extra=${EXTRA:-}" >> $out
for r in $(seq $rounds); do for t in $threads; do for b in "$@"; do
  j=/tmp/abgeo.json
  ${BIN_DIR:-/work/bin}/luigi-$b bench micro --shards 2 --replicas 3 --net geo --threads $t --in-flight 200 --duration 10 --no-progress --json $j ${EXTRA:-} > /tmp/abgeo.log 2>&1 || { echo "$b t$t FAILED" >> $out; continue; }
  python3 - $j $b $t >> $out <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); d=d[0] if isinstance(d,list) else d
c=d.get('cpu') or {}
us=1e6*(c['client_s']+c['servers_s'])/d['committed']
l=d['latency_us']
print(f"t{sys.argv[3]} {sys.argv[2]:>6} tps {d['throughput_tps']:7.0f} avg {l['avg']/1000:5.0f}ms p99 {l['p99']/1000:5.0f}ms fast {d.get('fast_path_rate',0):.3f} asked {d.get('fast_path_asked_rate',0):.3f} 2nd {d.get('second_round_rate',0):.3f} us/txn {us:6.0f}")
PY
done; done; done
