#!/usr/bin/env python3
# Renders a SPIN trail of model/relay.pml short:
#   spin -D<MUTANT> -t -p -g relay.pml | model/render-relay-trail.py
# Prints, per step, which process moved (and the model line of its step) and the global variables
# the step changed, with their new values (the outbox rows, the relays' and consumers' hands, the
# broker's copies, the inbox, the ghost counters), and drops SPIN's bookkeeping and the scratch
# variables. (model/render-trail.py does the same for lease.pml from `spin -t -p` alone; here -g is
# needed because SPIN's -p does not print the first statement of an inline inside a d_step.)
import re
import sys

# process ids as relay.pml's init starts them
NAMES = {"1": "relay(0)", "2": "relay(1)", "3": "leases", "4": "consumer(0)", "5": "consumer(1)", "6": "operator"}
SCRATCH = {"j", "seq", "recorded", "appliedMax"}

step_re = re.compile(r"\s*(\d+):\s+proc\s+(\d+) \((\w+):\d+\) relay\.pml:(\d+)")
value_re = re.compile(r"^\t\t(\w+(?:\[\d+\])?) = (-?\d+)$")

# what init sets before the first step (SPIN's -g prints an array only once a step has changed it)
before: dict[str, str] = {"keySeq[0]": "1", "givenTo[1]": "1", "keyState[1]": "1"}
current: dict[str, str] = {}
header = None


def flush() -> None:
    global before
    if header is None:
        return
    changed = [f"{name} = {value}" for name, value in current.items() if before.get(name, "0") != value and name.split("[")[0] not in SCRATCH]
    if changed:
        print(header)
        print("    " + ", ".join(changed))
    before = dict(current)


print(
    "# status 0 pending, 1 processing, 2 processed, 3 dead; rphase 0 idle, 1 claimed, 2 confirmed, 3 completed first;"
    " cphase 0 idle, 1 held, 2 committed, 4 effect apart, 5 number read;"
    " ready[3m + n]: the broker's copies of message m carrying key number n"
)
last_step = None
for line in sys.stdin:
    match = step_re.match(line)
    if match is not None:
        step, proc, _name, source = match.groups()
        if "<valid end state>" in line:
            continue
        if step != last_step:
            flush()
            last_step = step
            header = f"step {step}: {NAMES.get(proc, 'init')} (relay.pml:{source})"
        continue
    value = value_re.match(line)
    if value is not None:
        current[value.group(1)] = value.group(2)
        continue
    if "assertion violated" in line or "text of failed assertion" in line or "CYCLE" in line:
        flush()
        header = None
        print(line.strip())
flush()
