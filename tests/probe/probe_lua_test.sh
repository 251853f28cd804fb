#!/usr/bin/env bash
# Dynamic probes on a program nobody here wrote, against the kernel's own
# uprobes (the oracle): upstream Lua 5.4.4 (tests/realworld/sources, checked
# against its SHA256SUMS) built with plain `gcc -O2`, and again with
# `-fcf-protection` (endbr64 at every entry), no tracing flag. The same
# uprobe_events lines (PATH:OFFSET, as the kernel takes them) are defined
#   1. in the kernel (/sys/kernel/tracing/uprobe_events), the workload run;
#   2. in the process, by `usrtrace record --probe LINE ... -- lua`;
# both runs with ASLR off (setarch -R), so that code addresses are the same.
# For every probe: entry, return ($retval), register, stack ($stack0),
# string, nested dereference and mid-function, the recorded values must be
# the kernel's, event for event and in order, and the hits usrtrace recorded
# must equal the kernel's uprobe_profile. Then $argN (which this kernel
# refuses for uprobes) must give what %di/%si/... gave.
#
#   probe_lua_test.sh WORKDIR USRTRACE_CLI
#
# Exits 77 (skipped) when the kernel's uprobe_events is not writable or
# setarch is missing.
set -euo pipefail
mkdir -p "$1"
work=$(realpath "$1")
cli=$(realpath "$2")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rw=$here/../realworld
test_name=probe_lua
group=usrtrace_probe_lua
# shellcheck source=kernel_uprobes.sh
. "$here/kernel_uprobes.sh"
kernel_uprobes_open

(cd "$rw/sources" && sha256sum --quiet -c SHA256SUMS) || fail "sources/ do not match SHA256SUMS"
src=$work/src
if [[ ! -d $src/lua-5.4.4 ]]; then
  mkdir -p "$src"
  tar -xzf "$rw/sources/lua-5.4.4.tar.gz" -C "$src"
fi


# offset LUA SYMBOL [+N]: SYMBOL's file offset (+N), as uprobe_events takes it.
offset() {
  python3 - "$@" <<'PY'
import subprocess, sys
path, sym = sys.argv[1], sys.argv[2]
extra = int(sys.argv[3]) if len(sys.argv) > 3 else 0
addr = None
for line in subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if len(f) == 3 and f[2] == sym:
        addr = int(f[0], 16)
for line in subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if f and f[0] == "LOAD":
        off, vaddr, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
        if vaddr <= addr < vaddr + filesz:
            print(hex(addr - vaddr + off + extra))
PY
}

# third_insn LUA SYMBOL: the offset of SYMBOL's third instruction from its
# start (objdump's decoding, not ours), for the mid-function probe.
third_insn() {
  objdump -d --no-show-raw-insn "$1" | python3 -c '
import re, sys
want, on, addrs = "<" + sys.argv[1] + ">:", False, []
for line in sys.stdin:
    f = line.split()
    if len(f) == 2 and f[1] == want:
        on = True
        continue
    m = re.match(r"\s*([0-9a-f]+):", line)
    if on and m:
        addrs.append(int(m.group(1), 16))
    if on and not line.strip():
        on = False
print(addrs[2] - addrs[0] if len(addrs) >= 3 else "")
' "$2"
}

# report FILE: its events as "EVENT: (IP) ARGS", one blank between words.
report() {
  "$cli" report -i "$1" | grep -v '^cpus=' | sed -E 's/^.*: ([a-z_0-9]+): +/\1: /'
}

check_build() {
  local name=$1 flags=$2 d=$work/$1
  mkdir -p "$d"
  local lua=$d/lua
  if [[ ! -x $lua ]]; then
    # shellcheck disable=SC2086
    gcc -std=gnu99 -O2 $flags -DLUA_COMPAT_5_3 -DLUA_USE_LINUX '-Dluai_makeseed(L)=0u' -w \
      $(ls "$src"/lua-5.4.4/src/*.c | grep -v '/luac\.c$') -o "$lua" -lm -ldl -Wl,-E ||
      fail "$name: building lua"
  fi
  local mid
  mid=$(third_insn "$lua" luaO_str2num)
  [[ -n $mid ]] || fail "$name: no instructions found in luaO_str2num"
  # The lines, GRP/EVENT given so that both sides name them alike.
  local defs=(
    "p:$group/str2num $lua:$(offset "$lua" luaO_str2num) s=+0(%di):string"
    "r:$group/str2num_ret $lua:$(offset "$lua" luaO_str2num) n=\$retval:u64"
    "p:$group/str2num_mid $lua:$(offset "$lua" luaO_str2num "$mid") c=+0(%di):u8 c2=+1(%di):s8"
    "p:$group/concat $lua:$(offset "$lua" luaV_concat) total=%si:s32 ret=\$stack0:x64"
    "p:$group/resize $lua:$(offset "$lua" luaH_resize) na=%dx:u32 nh=%cx:u32 lsize=+11(%si):u8"
    "p:$group/fmt $lua:$(offset "$lua" luaO_pushvfstring) fmt=+0(%si):string first=+0(%si):u8"
  )
  local events=(str2num str2num_ret str2num_mid concat resize fmt)
  # 1. The kernel.
  kernel_uprobes_cleanup
  for l in "${defs[@]}"; do
    echo "$l" >>"$T/uprobe_events" || { tail -3 "$T/error_log" >&2; fail "$name: the kernel refused '$l'"; }
  done
  echo 1 >"$T/events/$group/enable"
  echo >"$T/trace"
  (cd "$d" && RW_NO_ERRORS=1 setarch -R "$lua" "$rw/lua/workload.lua" >"$d/alone.out") || fail "$name: lua failed"
  echo 0 >"$T/events/$group/enable"
  # The kernel's trace prints its own way: "(0xIP)" and "(0xRET <- 0xFUNC)";
  # the format file (which trace-cmd and usrtrace report follow) says
  # "(%lx)" and "(%lx <- %lx)", FUNC, RET. Compared in the second form.
  grep -v '^#' "$T/trace" | sed -E 's/^.*: ([a-z_0-9]+): /\1: /; s/\(0x([0-9a-f]+) <- 0x([0-9a-f]+)\)/(\2 <- \1)/; s/^([a-z_0-9]+: )\(0x([0-9a-f]+)\)/\1(\2)/' >"$d/kernel.txt"
  cp "$T/uprobe_profile" "$d/kernel.profile"
  kernel_uprobes_cleanup
  [[ -s $d/kernel.txt ]] || fail "$name: the kernel recorded nothing"

  # 2. usrtrace, the same lines.
  local args=()
  for l in "${defs[@]}"; do args+=(--probe "$l"); done
  (cd "$d" && RW_NO_ERRORS=1 setarch -R "$cli" record "${args[@]}" -o "$d/probe.dat" -- "$lua" \
    "$rw/lua/workload.lua" >"$d/probe.out" 2>"$d/probe.err") || { cat "$d/probe.err" >&2; fail "$name: record"; }
  cmp -s "$d/alone.out" "$d/probe.out" || fail "$name: the output under probes differs from the output alone"
  grep -q ' 0 events lost' "$d/probe.err" || { cat "$d/probe.err" >&2; fail "$name: events lost"; }
  report "$d/probe.dat" >"$d/usrtrace.txt"
  if ! cmp -s "$d/kernel.txt" "$d/usrtrace.txt"; then
    diff "$d/kernel.txt" "$d/usrtrace.txt" | head -20 >&2
    fail "$name: the recorded values differ from the kernel's (kernel < > usrtrace)"
  fi
  # Hits: the kernel's uprobe_profile against the events recorded.
  for e in "${events[@]}"; do
    local k u
    k=$(awk -v e="$e" '$2 == e { print $3 }' "$d/kernel.profile")
    u=$(grep -c "^$e: " "$d/usrtrace.txt" || true)
    [[ $k == "$u" ]] || fail "$name: $e: the kernel counted $k hits, usrtrace recorded $u"
    echo "probe_lua: $name $e: $u hits, as the kernel's"
  done

  # 3. $argN, which this kernel refuses for uprobes: what the registers gave.
  (cd "$d" && RW_NO_ERRORS=1 setarch -R "$cli" record \
    --probe "p:$group/resize $lua:$(offset "$lua" luaH_resize) na=\$arg3:u32 nh=\$arg4:u32 lsize=+11(\$arg2):u8" \
    -o "$d/args.dat" -- "$lua" "$rw/lua/workload.lua" >/dev/null 2>"$d/args.err") ||
    { cat "$d/args.err" >&2; fail "$name: record with \$argN"; }
  report "$d/args.dat" >"$d/args.txt"
  grep '^resize: ' "$d/kernel.txt" >"$d/kernel.resize.txt"
  cmp -s "$d/kernel.resize.txt" "$d/args.txt" || {
    diff "$d/kernel.resize.txt" "$d/args.txt" | head >&2
    fail "$name: \$argN gave other values than the registers"
  }
  echo "probe_lua: $name: \$arg2..4 equal %si %dx %cx for $(wc -l <"$d/args.txt") calls"
}

check_build gcc-O2 ""
check_build gcc-O2-cf "-fcf-protection"
echo "probe_lua: passed"
