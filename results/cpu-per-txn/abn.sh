#!/bin/bash
# usage: BINS="A B ..." abn.sh OUT ROUNDS "S R;S R;..." : alternating luigi bench micro runs, one line per run appended to OUT
# The binaries are ${BIN_DIR:-/work/bin}/luigi-NAME for each NAME of BINS; THREADS (8) and EXTRA (more bench args) apply to every run.
# Each run: luigi bench micro --shards S --replicas R --net none --threads 8 --duration 10; one line per run with the
# measured interval's CPU per committed transaction (client and servers, from the JSON's cpu) and the load average.
out=$1; rounds=$2; shapes=$3; shift 3
echo "# $(date -u +%FT%TZ) abn.sh rounds=$rounds shapes=$shapes bins=$* extra=${EXTRA:-}" >> $out
IFS=';' read -r -a sh <<< "$shapes"
for r in $(seq $rounds); do for s in "${sh[@]}"; do set -- $s; S=$1; R=$2; for b in $BINS; do
  j=/tmp/abn-$$.json
  ${BIN_DIR:-/work/bin}/luigi-$b bench micro --shards $S --replicas $R --net none --threads ${THREADS:-8} --duration 10 --no-progress --json $j ${EXTRA:-} > /tmp/abn-$$.log 2>&1 || { echo "$b ${S}x$R FAILED" >> $out; continue; }
  python3 - $j $b "${S}x$R" "$(cut -d' ' -f1 /proc/loadavg)" >> $out <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); d=d[0] if isinstance(d,list) else d
c=d.get('cpu') or {}
us=1e6*(c['client_s']+c['servers_s'])/d['committed']
print(f"{sys.argv[3]} {sys.argv[2]:>8} tps {d['throughput_tps']:8.0f} us/txn {us:6.1f} client {c['client_s']:.2f} servers {c['servers_s']:.2f} lat {d['latency_us']['avg']/1000:.1f}ms fast {d.get('fast_path_rate',0):.3f} load {sys.argv[4]}")
PY
done; done; done
