#!/usr/bin/env python3
"""uprobes.py GROUP BINARY [SYMBOLS]: an uprobe_events line for the entry of every
function of BINARY with a size (nm -S; _start and gcc's cold parts
excepted, as usrtrace has them: no call enters them), "p:GROUP/f<N> BINARY:0xOFFSET" on stdout; and
BINARY.names, "f<N> NAME" per line, to map uprobe_profile's event names
back to functions, and BINARY.addrs, "HEXADDR NAME". SYMBOLS: the binary to
read the symbols of, when BINARY is its stripped copy (same code)."""
import re
import subprocess
import sys

group, path = sys.argv[1], sys.argv[2]
symbols = sys.argv[3] if len(sys.argv) > 3 else path  # a stripped binary's unstripped twin
loads = []
for line in subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if f and f[0] == "LOAD":
        loads.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
# Aliases: one probe per address, named as usrtrace names it (the least
# name of the address).
by_addr = {}
for line in subprocess.run(["nm", "-S", "--defined-only", symbols], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if len(f) != 4 or f[2] not in "tT" or int(f[1], 16) == 0 or f[3] == "_start":
        continue
    if re.search(r"\.cold(\.\d+)?$", f[3]):  # a part of a function, jumped to: no entry
        continue
    addr = int(f[0], 16)
    by_addr[addr] = min(by_addr.get(addr, f[3]), f[3])
names = []
for addr in sorted(by_addr):
    for off, vaddr, filesz in loads:
        if vaddr <= addr < vaddr + filesz:
            n = len(names)
            names.append(f"f{n} {by_addr[addr]}")
            print(f"p:{group}/f{n} {path}:{hex(addr - vaddr + off)}")
            break
with open(path + ".names", "w") as out:
    out.write("\n".join(names) + "\n")
with open(path + ".addrs", "w") as out:
    out.write("".join(f"{addr:x} {by_addr[addr]}\n" for addr in sorted(by_addr)))
