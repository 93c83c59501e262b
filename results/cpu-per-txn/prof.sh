#!/usr/bin/env bash
# prof.sh BIN LABEL SHARDS REPLICAS: perf record of the servers of one bench run
set -u
bin=$1 label=$2 s=$3 r=$4
out=/work/cpu-prof/$label-${s}x$r
"$bin" bench micro --shards $s --replicas $r --net none --threads 8 --duration 10 --warmup 2 --no-progress --json $out.json > $out.log 2>&1 &
bench=$!
# wait for the servers to exist and the warm-up
sleep 6
pids=$(pgrep -P $bench | paste -sd,)
echo "bench $bench servers $pids"
perf record -F 250 --call-graph dwarf,16384 -o $out.perf.data -p "$pids" -- sleep 6 2> $out.perf.err
wait $bench
echo "bench rc $?"
perf report -i $out.perf.data --no-children --sort symbol --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60 > $out.top.txt
