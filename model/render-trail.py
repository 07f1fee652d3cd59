#!/usr/bin/env python3
# Renders a SPIN trail short: `spin -D<MUTANT> -t -p lease.pml | model/render-trail.py`. Keeps, per
# step, which process moved (and the model line of its step) and what it wrote to the rows, the
# workers' leases and the count of refused writes without their 'refused' row (unrecorded), and
# drops SPIN's bookkeeping (loop counters, audit scratch, control flow).
import re
import sys

KEEP = re.compile(r"\[((status|left|token|keyState|effects|everSkipped|phase|wm|wtok)\[|unrecorded = )")
seen = set()
for line in sys.stdin:
    match = re.match(r"\s*(\d+):\s+proc\s+(\d+) \((\w+):\d+\) lease\.pml:(\d+)", line)
    if match is None:
        if "assertion violated" in line or "CYCLE" in line:
            print(line.rstrip())
        continue
    step, proc, name, source = match.groups()
    if "<valid end state>" in line:
        continue
    if step not in seen:
        seen.add(step)
        print(f"step {step}: {name} {proc} (lease.pml:{source})")
    statement = line.split("\t")[-1].strip()
    if KEEP.search(statement):
        print(f"    {statement}")
