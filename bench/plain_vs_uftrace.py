#!/usr/bin/env python3
"""Code built with no tracing flag, usrtrace against uftrace's dynamic
tracing (`uftrace record -P`), on one unmodified binary (plain_target.c,
plain -O2), in one run (docs: bench/README.md, "Code built with no flag").

Per call of a traced leaf: the binary times `leaf` itself (best of 5
rounds), alone, under `usrtrace record -p function -l leaf`, `-p
function_graph -l leaf`, and `uftrace record -P leaf` (uftrace's entry and
exit, as function_graph). Rounds interleave the four, and each row is the
median over rounds of ns per call above the untraced call of that round.

Attach (usrtrace only: uftrace cannot attach to a running process): the
binary started, waiting, and `usrtrace start -P PID -p function_graph -l
leaf` timed (ptrace, dlopen of the runtime, symbols, arming), then `usrtrace
reset -P PID` (disarming), then the same start again (the runtime is there
now). And the whole job of a trivial run of the binary (1 call), as a user
runs each tool: `usrtrace record ... -- CMD` against `uftrace record -P leaf
CMD`, wall time.

    plain_vs_uftrace.py --cli USRTRACE --target PLAIN_BENCH_TARGET [--rounds N] [--calls N]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run_target(cmd, cwd):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True).stdout
    cpu, wall = out.strip().splitlines()[-1].split()
    return float(cpu), float(wall)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200000)
    a = ap.parse_args()
    have_uftrace = shutil.which("uftrace") is not None
    tmp = tempfile.mkdtemp(prefix="usrtrace-plain.")
    calls = str(a.calls)
    cases = {
        "alone": [a.target, calls],
        "usrtrace function": [a.cli, "record", "-q", "-p", "function", "-l", "leaf", "-o", "f.dat", "--", a.target, calls],
        "usrtrace function_graph": [a.cli, "record", "-q", "-p", "function_graph", "-l", "leaf", "-o", "g.dat", "--",
                                    a.target, calls],
    }
    if have_uftrace:
        cases["uftrace record -P leaf"] = ["uftrace", "record", "-P", "leaf", "--no-libcall", "-d", "uf.data", a.target,
                                           calls]
    per = {k: [] for k in cases}
    for _ in range(a.rounds):
        got = {k: run_target(cmd, tmp) for k, cmd in cases.items()}
        for k in cases:
            per[k].append(got[k][0] - got["alone"][0])
    # Every call was seen: the traces hold CALLS x 5 calls of leaf.
    n_f = subprocess.run([a.cli, "report", os.path.join(tmp, "f.dat")], capture_output=True, text=True).stdout.count(" leaf")
    print("| per call of leaf, above the untraced call (ns, cpu) | median | ratio to uftrace |")
    print("|---|---|---|")
    uf = statistics.median(per["uftrace record -P leaf"]) if have_uftrace else None
    for k in cases:
        if k == "alone":
            continue
        m = statistics.median(per[k])
        ratio = f"{m / uf:.2f}" if uf else "n/a"
        print(f"| {k} | {m:.1f} | {ratio} |")
    print(f"\nthe untraced call: {statistics.median([run_target(cases['alone'], tmp)[0] for _ in range(3)]):.2f} ns; "
          f"usrtrace's function trace holds {n_f} calls of leaf ({5 * a.calls} made)")

    # Attach.
    starts, resets, again = [], [], []
    for _ in range(a.rounds):
        p = subprocess.Popen([a.target, "1", "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        subprocess.run([a.cli, "start", "-P", str(p.pid), "-p", "function_graph", "-l", "leaf"], check=True,
                       capture_output=True)
        t1 = time.monotonic()
        subprocess.run([a.cli, "reset", "-P", str(p.pid)], check=True, capture_output=True)
        t2 = time.monotonic()
        subprocess.run([a.cli, "start", "-P", str(p.pid), "-p", "function_graph", "-l", "leaf"], check=True,
                       capture_output=True)
        t3 = time.monotonic()
        p.communicate("go\n")
        starts.append(t1 - t0)
        resets.append(t2 - t1)
        again.append(t3 - t2)
    print("\n| attach (usrtrace; uftrace cannot) | median ms |")
    print("|---|---|")
    print(f"| `start -P PID -p function_graph -l leaf`, first (ptrace + dlopen + symbols + arm) | {1e3 * statistics.median(starts):.1f} |")
    print(f"| `reset -P PID` (disarm) | {1e3 * statistics.median(resets):.1f} |")
    print(f"| `start` again (the runtime is loaded) | {1e3 * statistics.median(again):.1f} |")

    # The whole job of a trivial run.
    jobs = {"usrtrace record -p function_graph -l leaf -- CMD": [a.cli, "record", "-q", "-p", "function_graph", "-l",
                                                               "leaf", "-o", "w.dat", "--", a.target, "1"]}
    if have_uftrace:
        jobs["uftrace record -P leaf CMD"] = ["uftrace", "record", "-P", "leaf", "--no-libcall", "-d", "uw.data",
                                              a.target, "1"]
    walls = {k: [] for k in jobs}
    for _ in range(a.rounds):
        for k, cmd in jobs.items():
            t0 = time.monotonic()
            subprocess.run(cmd, cwd=tmp, check=True, capture_output=True)
            walls[k].append(time.monotonic() - t0)
    print("\n| a trivial run, the whole job | median wall ms |")
    print("|---|---|")
    for k in jobs:
        print(f"| `{k}` | {1e3 * statistics.median(walls[k]):.1f} |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
