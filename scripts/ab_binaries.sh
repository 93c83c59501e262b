#!/usr/bin/env bash
# Two builds of `luigi`, side by side in one session: for a change that claims to cost
# nothing (a refactor), throughput and CPU per committed transaction of micro and TPC-C on
# 1x3 and 2x3 (`--net none`, fsync, 2 threads x 200 in flight, 10 s after 2 s warm-up),
# A then B, PAIRS times per shape, so the machine's drift hits both alike. CPU is the user +
# system time of the whole `luigi bench` process tree (its server processes are reaped, so
# their CPU counts), from /usr/bin/time; "CPU us/txn" is that over the committed transactions of the measured
# window plus the warm-up's (an upper bound: setup CPU is included). "interval us/txn" is
# the measured interval's alone (client and servers, /proc at both its ends), from builds
# that record it (`cpu` in the results JSON; "-" otherwise). Each row ends with the load
# average when the run ended (`uptime`): other work on the machine shows there.
#
# Usage: A_LABEL=what B_LABEL=what scripts/ab_binaries.sh A_BIN B_BIN [OUT]   (PAIRS=2 by default;
# the labels, e.g. the commits the binaries were built from, go into the header).
# SHAPES="micro 1 1;micro 1 3" (workload shards replicas, ';'-separated), THREADS=2 and
# PROTOCOL=luigi override the shapes, the client threads and the protocol.
# Results: OUT (default results/ab/ab-binaries.txt) with the command, both binaries' commits
# and the machine on top; the runs' JSON files beside it in OUT.d/. A failed run is
# reported as failed and makes the script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
if (($# < 2)) || [[ ! -x $1 || ! -x $2 ]]; then
  echo "usage: scripts/ab_binaries.sh A_BIN B_BIN [OUT] (two executable luigi binaries; got: $*)" >&2
  exit 2
fi
a=$1 b=$2 out=${3:-results/ab/ab-binaries.txt}
pairs=${PAIRS:-2}
dir=$out.d
rm -rf "$dir" && mkdir -p "$dir"
status=0
IFS=';' read -r -a shapes <<< "${SHAPES:-micro 1 3;micro 2 3;tpcc 1 3;tpcc 2 3}"
threads=${THREADS:-2}
protocol=${PROTOCOL:-luigi}
run() { # label bin workload shards replicas pair
  local label=$1 bin=$2 w=$3 s=$4 r=$5 p=$6
  local json=$dir/$w-${s}x$r-$label-$p.json
  local t=$dir/$w-${s}x$r-$label-$p.time
  if ! /usr/bin/time -f "%U %S" -o "$t" "$bin" bench "$w" --shards "$s" --replicas "$r" --threads "$threads" --net none \
      --protocol "$protocol" --duration 10 --no-progress --json "$json" > "$dir/$w-${s}x$r-$label-$p.log" 2>&1; then
    echo "| $w ${s}x$r | $label | pair $p | FAILED (see $dir/$w-${s}x$r-$label-$p.log) | | | | |"
    status=1
    return
  fi
  python3 - "$json" "$(tail -1 "$t")" "$w ${s}x$r" "$label" "$p" "$(uptime | sed 's/.*load average: //')" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d = d[0] if isinstance(d, list) else d
user, sys_ = (float(x) for x in sys.argv[2].split()[-2:])
txns = d["committed"] * (1 + d["warmup_s"] / d["duration_s"])
cpu = d.get("cpu") or {}
interval = "-"
if cpu.get("servers_s") is not None and d["committed"] > 0:
    interval = f"{1e6 * (cpu['client_s'] + cpu['servers_s']) / d['committed']:,.1f}"
print(f"| {sys.argv[3]} | {sys.argv[4]} | pair {sys.argv[5]} | {d['throughput_tps']:,.0f} | {user + sys_:.1f} | {1e6 * (user + sys_) / txns:,.0f} | {interval} | {sys.argv[6]} |")
PY
}
{
  results_header "scripts/ab_binaries.sh $a $b (PAIRS=$pairs, THREADS=$threads, PROTOCOL=$protocol)"
  echo "# A: $a (${A_LABEL:-unlabelled}), B: $b (${B_LABEL:-unlabelled}); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo
  echo "| shape | build | pair | tx/s | CPU s | CPU us/txn | interval us/txn | load avg |"
  echo "|---|---|---|---|---|---|---|---|"
  for shape in "${shapes[@]}"; do
    read -r w s r <<< "$shape"
    for ((p = 1; p <= pairs; p++)); do
      run A "$a" "$w" "$s" "$r" "$p"
      run B "$b" "$w" "$s" "$r" "$p"
    done
  done
} | tee "$out"
exit "$status"
