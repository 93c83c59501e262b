#!/usr/bin/env python3
# Summarizes a run.sh / run-lan.sh log: per run, the reads' (YCSB reads and scans, TPC-C OrderStatus and
# StockLevel) average and p99 latency, all transactions' tx/s, and CPU per committed transaction.
# Usage: summarize.py LOG
import sys,re
name=None; rows=[]
for line in open(sys.argv[1]):
    if line.startswith('== '):
        name=line.split(':')[0][3:]; tps=None; cpu=None
    elif line.startswith('luigi:') and name and re.search(r'[0-9]+ tx/s',line):
        tps=re.search(r'([0-9]+) tx/s',line).group(1)
    elif re.match(r'^(ycsb\.(read|scan)|tpcc\.(order_status|stock_level)) ',line) and name:
        f=line.split(); rows.append((name,f[0],tps,f[-6],f[-3]))
    elif 'CPU' in line and name:
        m=re.search(r'([0-9.,]+) us per committed',line)
        if m: rows.append((name,'cpu',m.group(1),'',''))
for r in rows: print('%-40s %-18s %8s tx/s  avg %9s ms  p99 %9s ms'%r if r[1]!='cpu' else '%-40s CPU %s us per committed txn'%(r[0],r[2]))
