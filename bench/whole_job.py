#!/usr/bin/env python3
"""The whole job, as a user runs it: `usrtrace record` against `uftrace record`.

Builds Lua 5.4.4 (the upstream release vendored for tests/realworld, checked
against its SHA256SUMS, unmodified) with gcc -O2 -finstrument-functions,
and records the interpreter running tests/realworld/lua/workload.lua
--repeat times over (15 by default: about 3 million calls; 5 was the first
figure's million) with each recorder, the same binary for both. The variants run in a shuffled order in each round, and every ratio is
taken within a round (the machine's speed drifts between rounds, far less
within one), then the median over rounds is printed.

Per variant: wall time, cpu time (user + system of the recorder and the
program, as the kernel accounts the waited-for processes), the largest
process's peak memory (whole_job_launch.c says why a launcher), the
output's size, and the events lost as usrtrace record says on its last line
(uftrace says nothing of the kind; its calls, from `uftrace report`, are in
the header, and the program's calls per second alone). The events lost are
also listed run by run, warm-up round included, so that "0 in every run" is
seen, not a median.

Usage: whole_job.py --cli BUILD/tools/usrtrace [--rounds N] [--repeat N] [--work DIR]
Prints a Markdown table on stdout; progress on stderr.
"""
import argparse
import hashlib
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(ROOT, "tests/realworld/sources")
WORKLOAD = os.path.join(ROOT, "tests/realworld/lua/workload.lua")
LUA = "lua-5.4.4"


def log(msg):
    print("whole_job: " + msg, file=sys.stderr, flush=True)


def build_lua(work):
    """The interpreter as tests/realworld builds its gcc-O2-instrument variant."""
    tarball = os.path.join(SOURCES, LUA + ".tar.gz")
    want = None
    with open(os.path.join(SOURCES, "SHA256SUMS")) as f:
        for line in f:
            digest, name = line.split()
            if name.lstrip("*") == LUA + ".tar.gz":
                want = digest
    got = hashlib.sha256(open(tarball, "rb").read()).hexdigest()
    if got != want:
        sys.exit(f"whole_job: {tarball}: sha256 {got}, SHA256SUMS says {want}")
    lua = os.path.join(work, "lua")
    if os.path.exists(lua):
        return lua
    subprocess.run(["tar", "-xzf", tarball, "-C", work], check=True)
    src = os.path.join(work, LUA, "src")
    cfiles = sorted(os.path.join(src, c) for c in os.listdir(src) if c.endswith(".c") and c != "luac.c")
    log("building Lua 5.4.4 with gcc -O2 -g -finstrument-functions")
    subprocess.run(["gcc", "-std=gnu99", "-O2", "-g", "-finstrument-functions", "-w", "-DLUA_COMPAT_5_3",
                    "-DLUA_USE_LINUX", "-Dluai_makeseed(L)=0u", *cfiles, "-o", lua, "-lm", "-ldl", "-Wl,-E"],
                   check=True)
    return lua


def run(launch, cmd, env, out_path, err_path):
    """Runs cmd under the launcher; returns wall s, user s, sys s, peak KiB, exit status."""
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        subprocess.run([launch, *cmd], stdout=out, stderr=err, env=env, cwd=os.path.dirname(out_path))
    last = open(err_path).read().rstrip().splitlines()[-1]
    if not last.startswith("whole_job_launch: "):
        sys.exit(f"whole_job: the launcher said {last!r}")
    wall, user, sys_, peak, rc = last.split()[1:]
    return float(wall), float(user), float(sys_), int(peak), int(rc)


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path) if os.path.exists(path) else 0


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def profile_calls(cmd):
    """The Calls column summed over a profile table (uftrace report's layout, which
    usrtrace report --profile keeps): two header lines, the count in the fifth field."""
    rep = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    calls = 0
    for line in rep.splitlines()[2:]:
        f = line.split()
        if len(f) >= 6 and f[4].isdigit():
            calls += int(f[4])
    return calls


def uftrace_calls(data):
    return profile_calls(["uftrace", "report", "-d", data])


def usrtrace_calls(cli, path):
    """The calls of a function_graph recording, as `usrtrace report --profile` counts them."""
    return profile_calls([cli, "report", "--profile", "-i", path])


def setup(prog):
    """The command line (--cli, --rounds, --work), the work directory, Lua built in it and the
    launcher: what this benchmark and profile_vs_uftrace.py start with."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True, help="the usrtrace command")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=15, help="times the job runs the Lua workload")
    ap.add_argument("--work", help="a directory to build and record in (default: a temporary one)")
    a = ap.parse_args()
    if not shutil.which("uftrace"):
        sys.exit(f"{prog}: uftrace is not installed (apt-get install uftrace)")
    work = a.work or tempfile.mkdtemp(prefix=f"usrtrace-{prog}-")
    os.makedirs(work, exist_ok=True)
    lua = build_lua(work)
    launch = os.path.join(work, "whole_job_launch")
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", os.path.join(ROOT, "bench/whole_job_launch.c"), "-o", launch],
                   check=True)
    return a, work, lua, launch


def main():
    a, work, lua, launch = setup("whole_job")
    job = os.path.join(work, "job.lua")
    with open(job, "w") as f:
        f.write(f"local w = os.getenv('WJ_WORKLOAD')\nfor i = 1, {a.repeat} do dofile(w) end\n")
    env = dict(os.environ, RW_NO_ERRORS="1", WJ_WORKLOAD=WORKLOAD)
    cli = os.path.abspath(a.cli)

    # name: (command, output or None). uftrace's options are tests/realworld's
    # (--no-libcall: no PLT hooks; the depth limits above the deepest
    # recursion, so that every call is recorded).
    def out(name):
        return os.path.join(work, name)

    def usrtrace(output, *opts, env_extra=None):
        return [cli, "record", *opts, "-o", out(output), "--", lua, job], out(output), env_extra or {}

    # (command, output or None, environment added)
    variants = {
        "usrtrace -p function_graph": usrtrace("g.dat", "-p", "function_graph"),
        "usrtrace -p function_graph --compression zstd": usrtrace(
            "gz.dat", "-p", "function_graph", "--compression", "zstd"),
        # The same compressed at the end, as every compressed recording was
        # before the journal compressed while recording: a size limit far
        # above the job keeps the page files (docs/design/record-journal.md).
        "usrtrace -p function_graph --compression zstd -m 100000000 (compressed at the end)": usrtrace(
            "gze.dat", "-p", "function_graph", "--compression", "zstd", "-m", "100000000"),
        # Before the shared buffers: pages through the process's socket,
        # with a buffer large enough to lose nothing.
        "usrtrace -p function_graph -b 262144, through the socket": usrtrace(
            "gs.dat", "-p", "function_graph", "-b", "262144", env_extra={"USRTRACE_SHARED_BUFFERS": "0"}),
        "usrtrace -p function": usrtrace("f.dat", "-p", "function"),
        "uftrace record": (["uftrace", "record", "--no-libcall", "--no-event", "-D", "50000", "--max-stack=50000",
                            "-d", out("uftrace.data"), lua, job], out("uftrace.data"), {}),
        "the program alone": ([lua, job], None, {}),
    }
    base = "uftrace record"
    rows = {n: [] for n in variants}
    lost = {n: [] for n in variants}
    lost_all = {n: [] for n in variants}  # every run, the warm-up's included
    size = {n: [] for n in variants}
    calls_uftrace = []
    calls_usrtrace = []
    rng = random.Random(1)
    for r in range(a.rounds + 1):  # round 0 warms the caches and is not counted
        order = list(variants)
        rng.shuffle(order)
        for n in order:
            cmd, o, extra = variants[n]
            if o:
                remove(o)
            wall, user, sys_, peak, rc = run(launch, cmd, dict(env, **extra), out("stdout"), out("stderr"))
            if rc != 0:
                sys.exit(f"whole_job: {n} exited {rc}: " + open(out("stderr")).read()[-2000:])
            m = re.search(r"; (\d+) events lost", open(out("stderr")).read())
            if m:
                lost_all[n].append(int(m.group(1)))
            if r == 0:
                continue
            rows[n].append((wall, user + sys_, user, sys_, peak))
            if o:
                size[n].append(size_of(o))
            err = open(out("stderr")).read()
            m = re.search(r"; (\d+) events lost", err)
            if m:
                lost[n].append(int(m.group(1)))
            if n == base:
                calls_uftrace.append(uftrace_calls(o))
            if n == "usrtrace -p function_graph" and not calls_usrtrace:
                calls_usrtrace.append(usrtrace_calls(cli, o))
        log(f"round {r} of {a.rounds} done")

    med = lambda xs: statistics.median(xs) if xs else float("nan")

    def ratio(n, k):
        return med([rows[n][i][k] / rows[base][i][k] for i in range(len(rows[n])) if rows[base][i][k] > 0])

    alone = med([x[0] for x in rows["the program alone"]])
    calls = med(calls_usrtrace)
    print(f"Lua 5.4.4 (gcc -O2 -finstrument-functions) running tests/realworld's workload {a.repeat} times: "
          f"{calls:.0f} calls as `usrtrace report --profile` counts them in the function_graph recording "
          f"({med(calls_uftrace):.0f} in `uftrace report`'s Calls column); {calls / alone / 1e6:.1f} M calls/s "
          f"alone, {calls / med([x[0] for x in rows[base]]) / 1e6:.1f} M calls/s under uftrace; median of "
          f"{a.rounds} rounds, ratios to uftrace taken within each round.\n")
    print("| | wall | cpu (user / sys) | peak memory | output | events lost |")
    print("|---|---|---|---|---|---|")
    for n in variants:
        w, c, u, s, p = (med([x[k] for x in rows[n]]) for k in range(5))
        rel = "" if n == base else f" ({ratio(n, 0):.2f}x)"
        relc = "" if n == base else f" ({ratio(n, 1):.2f}x)"
        o = f"{med(size[n]) / 1e6:.1f} MB" if size[n] else "-"
        if variants[n][1] and n != base:
            o += f" ({med(size[n]) / med(size[base]):.2f}x)"
        l = f"{med(lost[n]):.0f}" if lost[n] else ("none reported" if n == base else "-")
        print(f"| {n} | {w:.3f} s{rel} | {c:.3f} s{relc} ({u:.3f} / {s:.3f}) | {p / 1024:.0f} MiB | {o} | {l} |")
    print("\nEvents lost, every run (the warm-up round first):\n")
    for n in variants:
        if lost_all[n]:
            print(f"- {n}: {' '.join(str(x) for x in lost_all[n])}")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
