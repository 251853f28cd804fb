#!/usr/bin/env python3
"""The numbers a uftrace user reads: `usrtrace report --profile` beside `uftrace report`.

The same binary as whole_job.py (Lua 5.4.4, the vendored upstream release,
gcc -O2 -g -finstrument-functions), running tests/realworld's workload once,
recorded with `usrtrace record -p function_graph` and with `uftrace record`
(tests/realworld's options: every call recorded), in a shuffled order in
each round. For every function both report:

- calls must be equal (the script exits 1 if any differ: that is a bug, not
  noise), but for the few that differ between any two runs of Lua;
- times differ by what each tool adds to every call it measures. Both take
  a time stamp in the entry hook and one in the exit hook; what a hook does
  before its entry stamp and after its exit stamp counts in the caller's
  self time, what it does after its entry stamp and before its exit stamp
  in the callee's. So:
  * a leaf function (total equal to self: it calls nothing traced) shows
    each tool's inner cost once per call: its average differs between the
    tools by one constant, the same for every leaf whatever its length;
  * main's total is the program's own time plus every call's whole hook
    cost: (total of main - the program alone) / calls is each tool's cost
    per call, which a function's total carries once for every call under it.

Printed: per round, then the median over rounds, as Markdown. Usage:
  profile_vs_uftrace.py --cli BUILD/tools/usrtrace [--rounds N] [--work DIR]
"""
import os
import random
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import whole_job  # noqa: E402  (the Lua build and the launcher)

# Calls that differ between any two runs of Lua, traced or not: tests/realworld/
# realworld_test.sh's nondeterministic() says why (pointer keys hashed by
# address, which ASLR moves). They need only be named by both tools.
NONDETERMINISTIC = re.compile(r"^(mainposition.*|getfreepos.*|luaH_newkey.*|getgeneric.*|equalkey.*|hashint|"
                              r"l_hashfloat|luaS_hashlongstr|internshrstr.*|luaS_newlstr.*|luaS_hash)$")
UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9}
TIME = r"(\d+(?:\.\d+)?) (ns|us|ms|s|m)"


def ns(value, unit):
    return float(value) * UNITS[unit]


def parse(text):
    """{function: (total ns, self ns, calls)} from either tool's report."""
    out = {}
    line_re = re.compile(r"^\s*" + TIME + r"\s+" + TIME + r"\s+(\d+)\s+(?:.*\s)?(\S+)\s*$")
    for line in text.splitlines():
        m = line_re.match(line)
        if m:
            out[m.group(6)] = (ns(m.group(1), m.group(2)), ns(m.group(3), m.group(4)), int(m.group(5)))
    return out


def main():
    a, work, lua, launch = whole_job.setup("profile_vs_uftrace")
    env = dict(os.environ, RW_NO_ERRORS="1")
    cli = os.path.abspath(a.cli)
    g, u = os.path.join(work, "g.dat"), os.path.join(work, "u.data")
    variants = {
        "usrtrace": [cli, "record", "-q", "-p", "function_graph", "-o", g, "--", lua, whole_job.WORKLOAD],
        "uftrace": ["uftrace", "record", "--no-libcall", "--no-event", "-D", "50000", "--max-stack=50000",
                    "-d", u, lua, whole_job.WORKLOAD],
        "alone": [lua, whole_job.WORKLOAD],
    }
    rng = random.Random(2)
    rounds = []
    for r in range(a.rounds + 1):  # round 0 warms the caches and is not counted
        order = list(variants)
        rng.shuffle(order)
        wall = {}
        for n in order:
            whole_job.remove(g if n == "usrtrace" else u)
            w, _, _, _, rc = whole_job.run(launch, variants[n], env, os.path.join(work, "stdout"),
                                           os.path.join(work, "stderr"))
            if rc != 0:
                sys.exit(f"profile_vs_uftrace: {n} exited {rc}: " + open(os.path.join(work, "stderr")).read()[-2000:])
            wall[n] = w
            if n == "usrtrace":
                ours = parse(subprocess.run([cli, "report", "--profile", "-i", g], capture_output=True, text=True,
                                            check=True).stdout)
            elif n == "uftrace":
                theirs = parse(subprocess.run(["uftrace", "report", "-d", u], capture_output=True, text=True,
                                              check=True).stdout)
        if r == 0:
            continue
        both = sorted(set(ours) & set(theirs))
        differ = [f for f in both if ours[f][2] != theirs[f][2] and not NONDETERMINISTIC.match(f)]
        if differ:
            for f in differ[:20]:
                print(f"calls differ: {f}: usrtrace {ours[f][2]}, uftrace {theirs[f][2]}", file=sys.stderr)
            sys.exit(1)
        calls = sum(theirs[f][2] for f in both)
        # Leaves with enough calls for an average (total = self in both).
        leaves = [f for f in both if theirs[f][2] >= 1000 and abs(theirs[f][0] - theirs[f][1]) < 1 and
                  abs(ours[f][0] - ours[f][1]) < 1]
        leaf_diff = [(ours[f][0] - theirs[f][0]) / theirs[f][2] for f in leaves]
        alone_ns = wall["alone"] * 1e9
        per_call = {t: (p["main"][0] - alone_ns) / calls for t, p in (("usrtrace", ours), ("uftrace", theirs))}
        rounds.append({"ours": ours, "theirs": theirs, "calls": calls, "leaves": leaves, "leaf_diff": leaf_diff,
                       "per_call": per_call, "alone": alone_ns, "only": (set(ours) ^ set(theirs))})
        print(f"profile_vs_uftrace: round {r} of {a.rounds} done", file=sys.stderr, flush=True)

    med = statistics.median
    last = rounds[-1]
    print(f"Lua 5.4.4 (gcc -O2 -finstrument-functions), tests/realworld's workload once: "
          f"{last['calls']} calls in {len(last['ours'])} functions, equal per function in every round "
          f"(but for those Lua's hashing of addresses moves, tests/realworld/realworld_test.sh) "
          f"({a.rounds} rounds; medians).\n")
    print("| function | calls | total usrtrace | total uftrace | ratio | self usrtrace | self uftrace |")
    print("|---|---|---|---|---|---|---|")
    top = sorted(last["theirs"], key=lambda f: -last["theirs"][f][1])[:12]
    for f in top:
        tu = med([r["ours"][f][0] for r in rounds if f in r["ours"]])
        tt = med([r["theirs"][f][0] for r in rounds if f in r["theirs"]])
        su = med([r["ours"][f][1] for r in rounds if f in r["ours"]])
        st = med([r["theirs"][f][1] for r in rounds if f in r["theirs"]])
        print(f"| {f} | {last['theirs'][f][2]} | {tu / 1e6:.3f} ms | {tt / 1e6:.3f} ms | {tu / tt:.2f} | "
              f"{su / 1e6:.3f} ms | {st / 1e6:.3f} ms |")
    diffs = [d for r in rounds for d in r["leaf_diff"]]
    print()
    print(f"- leaves ({len(last['leaves'])} functions of 1000 calls or more that call nothing traced): "
          f"average per call, usrtrace minus uftrace: median {med(diffs):+.1f} ns, "
          f"quartiles {statistics.quantiles(diffs, n=4)[0]:+.1f} / {statistics.quantiles(diffs, n=4)[2]:+.1f} ns")
    pu = med([r["per_call"]["usrtrace"] for r in rounds])
    pt = med([r["per_call"]["uftrace"] for r in rounds])
    print(f"- each tool's whole cost per call, main's total less the program alone "
          f"({med([r['alone'] for r in rounds]) / 1e6:.1f} ms), over the calls: usrtrace {pu:.1f} ns, "
          f"uftrace {pt:.1f} ns")
    if last["only"]:
        print(f"- named by one tool only: {', '.join(sorted(last['only'])[:10])}")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
