#!/usr/bin/env bash
# USDT probes on a program nobody here wrote, against the kernel's uprobes:
# Debian's /usr/bin/python3.11, built with SystemTap probes, each behind a
# semaphore that CPython tests before it prepares the probe's arguments
# (so nothing fires unless a tracer raised it). Three probes:
# function__entry (two strings and an int in registers; CPython 3.11 fires
# it only in a few places, twice at start), gc__start (the generation, an
# int at 112(%rsp)) and gc__done (what the collection found, in %r12).
#   1. The kernel: each site and semaphore read from `readelf -n` by this
#      script, the note's operands turned into fetch args by hand, and the
#      line written as PATH:OFFSET(REF_CTR_OFFSET), which makes the kernel
#      raise the semaphore.
#   2. usrtrace: `--probe 'p:GRP/EVENT %python:gc__start gen'` and so on,
#      the sites, semaphores and operands from the notes;
#   3. usrtrace with the kernel's own lines, REF_CTR_OFFSET and all.
# Both runs with ASLR off. Every event must be the kernel's, in order; the
# generations and counts those of the workload's own output; the hits of
# each probe the kernel's uprobe_profile.
#
#   probe_python_sdt_test.sh WORKDIR USRTRACE_CLI
#
# Exits 77 (skipped) when the kernel's uprobe_events is not writable, or
# python3.11 has no function__entry note.
set -euo pipefail
mkdir -p "$1"
work=$(realpath "$1")
cli=$(realpath "$2")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3.11
script=$here/sdt_workload.py

test_name=probe_python_sdt
group=usrtrace_sdt
# shellcheck source=kernel_uprobes.sh
. "$here/kernel_uprobes.sh"
[[ -x $py ]] || skip "$py is not installed"
readelf -n "$py" | grep 'Name: function__entry' >/dev/null || skip "$py has no USDT probes"
kernel_uprobes_open

# kernel_line EVENT NOTE: the kernel's line for the note NOTE of python,
# from readelf's words (not from usrtrace's reading of the note).
kernel_line() {
  python3 - "$py" "$group" "$1" "$2" <<'PY'
import re, subprocess, sys
py, group, event, want = sys.argv[1:]
notes = subprocess.run(["readelf", "-n", py], capture_output=True, text=True, check=True).stdout
loads = []
for line in subprocess.run(["readelf", "-lW", py], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if f and f[0] == "LOAD":
        loads.append((int(f[1], 16), int(f[2], 16), int(f[5], 16)))
def file_offset(vaddr):
    for off, va, memsz in loads:
        if va <= vaddr < va + memsz:
            return vaddr - va + off
    sys.exit("no segment holds 0x%x" % vaddr)
m = re.search(r"Name: %s\n\s*Location: (0x[0-9a-f]+), Base: (0x[0-9a-f]+), Semaphore: (0x[0-9a-f]+)\n\s*Arguments: (.*)" % want, notes)
if not m:
    sys.exit("no note " + want)
loc, sem, args = int(m.group(1), 16), int(m.group(3), 16), m.group(4).split()
regs = {"rax": "ax", "eax": "ax", "rbx": "bx", "ebx": "bx", "rcx": "cx", "ecx": "cx", "rdx": "dx", "edx": "dx",
        "rsi": "si", "esi": "si", "rdi": "di", "edi": "di", "rbp": "bp", "ebp": "bp", "rsp": "sp", "esp": "sp"}
for i in range(8, 16):
    regs["r%d" % i] = regs["r%dd" % i] = "r%d" % i
def fetch(arg):
    size, op = arg.split("@")
    t = ("s" if size[0] == "-" else "u") + str(8 * int(size.lstrip("-")))
    m = re.fullmatch(r"%(\w+)", op)
    if m:
        return "%" + regs[m.group(1)], t
    m = re.fullmatch(r"(-?\d*)\(%(\w+)\)", op)
    return "%+d(%%%s)" % (int(m.group(1) or 0), regs[m.group(2)]), t
f = [fetch(a) for a in args]
if want == "function__entry":  # char *filename, char *funcname, int lineno
    spec = "file=+0(%s):string func=+0(%s):string line=%s:%s" % (f[0][0], f[1][0], f[2][0], f[2][1])
elif want == "gc__start":
    spec = "gen=%s:%s" % f[0]
else:
    spec = "collected=%s:%s" % f[0]
print("p:%s/%s %s:0x%x(0x%x) %s" % (group, event, py, file_offset(loc), file_offset(sem), spec))
PY
}

# The kernel's trace as `usrtrace report` prints it ("(IP)" for "(0xIP)").
kernel_text() { grep -v '^#' "$T/trace" | sed -E 's/^.*: ([a-z_0-9]+): /\1: /; s/^([a-z_0-9]+: )\(0x([0-9a-f]+)\)/\1(\2)/'; }
report() { "$cli" report -i "$1" | grep -v '^cpus=' | sed -E 's/^.*: ([a-z_0-9]+): +/\1: /'; }

cd "$work"
probes=("fentry function__entry" "gcs gc__start" "gcd gc__done")
# 1. The kernel.
kernel_uprobes_cleanup
for e in "${probes[@]}"; do
  # shellcheck disable=SC2086
  l=$(kernel_line $e) || fail "reading $py's notes"
  echo "$l" >>"$T/uprobe_events" || { tail -3 "$T/error_log" >&2; fail "the kernel refused '$l'"; }
done
echo 1 >"$T/events/$group/enable"
echo >"$T/trace"
setarch -R "$py" -S -E "$script" >alone.out || fail "python failed"
echo 0 >"$T/events/$group/enable"
kernel_text >kernel.txt
cp "$T/uprobe_profile" kernel.profile
kernel_uprobes_cleanup
grep -q '^gcs: ' kernel.txt || fail "the kernel recorded no collection"

# 2. usrtrace.
setarch -R "$cli" record \
  --probe "p:$group/fentry %python:function__entry file:string func:string line" \
  --probe "p:$group/gcs %python:gc__start gen" \
  --probe "p:$group/gcd %python:gc__done collected" \
  -o probe.dat -- "$py" -S -E "$script" >probe.out 2>probe.err || { cat probe.err >&2; fail "record"; }
cmp -s alone.out probe.out || fail "the output under probes differs from the output alone"
grep -q ' 0 events lost' probe.err || { cat probe.err >&2; fail "events lost"; }
report probe.dat >usrtrace.txt
[[ -s usrtrace.txt ]] || fail "usrtrace recorded nothing (semaphores not raised?)"
if ! cmp -s kernel.txt usrtrace.txt; then
  diff kernel.txt usrtrace.txt | head -20 >&2
  fail "the recorded events differ from the kernel's (kernel < > usrtrace)"
fi
# 3. usrtrace again, with the kernel's own lines (PATH:OFFSET(REF_CTR_OFFSET)):
# the counter is raised as the kernel raises it, the same events recorded.
args=()
for e in "${probes[@]}"; do
  # shellcheck disable=SC2086
  args+=(--probe "$(kernel_line $e)")
done
setarch -R "$cli" record "${args[@]}" -o refctr.dat -- "$py" -S -E "$script" >refctr.out 2>refctr.err ||
  { cat refctr.err >&2; fail "record with the kernel's lines"; }
report refctr.dat >refctr.txt
if ! cmp -s kernel.txt refctr.txt; then
  diff kernel.txt refctr.txt | head -20 >&2
  fail "the kernel's lines (REF_CTR_OFFSET) recorded other events in usrtrace (kernel < > usrtrace)"
fi
# The workload's own account: its collections are the last ones (the
# interpreter's start collects too, before the workload turns that off).
want=$(sed -n 's/^generations //p' alone.out)
n=$(wc -w <<<"$want")
got=$(sed -n 's/^gcs: ([0-9a-f]*) gen=//p' usrtrace.txt | tail -n "$n" | tr '\n' ' ' | sed 's/ $//')
[[ $got == "$want" ]] || fail "generations recorded '$got', the workload asked for '$want'"
want=$(sed -n 's/^collected //p' alone.out)
got=$(sed -n 's/^gcd: ([0-9a-f]*) collected=//p' usrtrace.txt | tail -n "$n" | tr '\n' ' ' | sed 's/ $//')
[[ $got == "$want" ]] || fail "collections recorded '$got', the workload found '$want'"
# Hits against the kernel's uprobe_profile.
for e in fentry gcs gcd; do
  k=$(awk -v e="$e" '$2 == e { print $3 }' kernel.profile)
  u=$(grep -c "^$e: " usrtrace.txt || true)
  [[ -n $k && $k == "$u" ]] || fail "$e: usrtrace recorded $u events, the kernel's uprobe_profile says ${k:-nothing}"
done
echo "probe_python_sdt: $(wc -l <usrtrace.txt) events equal the kernel's; generations and counts the workload's; hits equal"
