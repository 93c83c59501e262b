#!/bin/bash
# usage: ab_stage.sh BEFORE AFTER OUT [THREADS...] (default threads: 1 8; PAIRS=2):
# stage.sh runs of two builds, alternating BEFORE and AFTER within each pair, every run
# headed by its binary, thread count and the load average; run from a copy of this folder.
B=$1; A=$2; OUT=$3; shift 3
THREADS=${*:-1 8}
cd "$(dirname "$0")"
for t in $THREADS; do
  for p in $(seq 1 "${PAIRS:-2}"); do
    for bin in "$B" "$A"; do
      echo "# $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg) | $(basename "$bin") t$t pair $p" >> "$OUT"
      ./stage.sh "$bin" "$t" >> "$OUT" 2>&1
    done
  done
done
