#!/usr/bin/env python3
"""Per-function call counts from a trace, for tests/realworld.

  counts.py graph REPORT OUT [PROGRAM]
                                 trace-cmd report -R of a function_graph
                                 recording: funcgraph_entry records counted per
                                 function and per buffer; every exit must close
                                 the innermost open entry of its thread, same
                                 function, same depth (exit status 1 and the
                                 first problems on stderr otherwise)
  counts.py function REPORT OUT [PROGRAM]
                                 trace-cmd report of a function recording
                                 (PROGRAM: the traced binary, whose names
                                 nm -C gives with their blanks)
  counts.py uftrace REPORT OUT [PROGRAM]
                                 `uftrace report -f call` text (with PROGRAM:
                                 only the functions it defines)
  counts.py profile REPORT OUT [PROGRAM]
                                 `usrtrace report --profile` text: the Calls
                                 column per function
  counts.py stacks REPORT        prints how many user_stack events there are

OUT gets "NAME COUNT" lines. Names are normalized the same way on every side:
everything from the first '(' is dropped and template arguments <...> are
removed (uftrace's default demangling prints "ns::f", our kallsyms
"ns::f(int) const"), so overloads are summed alike. With several buffers
(trace-cmd's -i of a file with instances prints them all), the counts are per
buffer: OUT gets "BUFFER NAME COUNT" when BUFFER is not the top one.
"""
import re
import sys


def demangle(sym):
    import subprocess
    return subprocess.run(["c++filt", sym], capture_output=True, text=True).stdout.strip() or sym


def norm(name):
    name = name.strip()
    # A C++ unit's static initializer is named after its first function's
    # mangled name; uftrace prints that demangled ("_GLOBAL__sub_I_f").
    m = re.match(r"^(_GLOBAL__sub_[ID]_)(_Z\S+)$", name)
    if m:
        return m.group(1) + norm(demangle(m.group(2)))
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out)
    i = name.find("(")
    if i > 0:
        name = name[:i]
    name = name.strip()
    # A demangled function template carries its return type ("void
    # std::_Construct", "outBuff* std::__addressof"); uftrace prints none.
    # Keep the last word, or from the word that holds "operator" ("operator
    # new", "Foo::operator bool").
    words = name.split()
    if len(words) > 1:
        k = next((j for j, w in enumerate(words) if "operator" in w), len(words) - 1)
        name = " ".join(words[k:])
    return name


SYMBOLS = {}
DEFINED = set()  # the program's functions, demangled in full (canonical())


def canonical(demangled):
    """A demangled name as nm -C and uftrace --demangle=full both print it.
    GCC's clone suffixes stay: pbzip2 at g++ -O3 has a local
    "std::allocator<char>::~allocator() [clone .constprop.0]", while the
    hooks of the inlined ones name libstdc++'s."""
    return demangled.strip()


def load_symbols(binary):
    """Our traces name functions as kallsyms can (src/symbols: the demangled
    name, blanks after commas dropped, other blanks turned into '_'), which
    cannot be split back into words. nm -C gives the words: map each of the
    program's names in our form to its normalized name."""
    import subprocess
    text = subprocess.run(["nm", "--defined-only", "-C", binary], capture_output=True, text=True).stdout
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or parts[1] not in "tTwW":
            continue
        demangled = parts[2]
        ours = re.sub(r", ", ",", demangled).replace(" ", "_").replace("\t", "_")
        SYMBOLS[ours] = norm(demangled)
        DEFINED.add(canonical(demangled))


def norm_ours(name):
    return SYMBOLS.get(name.strip()) or norm(name)


def write(path, counts):
    with open(path, "w") as f:
        for (buf, fn), n in sorted(counts.items()):
            f.write(f"{fn} {n}\n" if not buf else f"{buf} {fn} {n}\n")


def graph(report, out):
    # trace-cmd report -R (the records' fields, not the folded graph: trace-cmd
    # folds an entry with the next record of its thread into a leaf and then
    # consumes the next record of the entry's CPU, which breaks the picture
    # when the thread migrated inside the call):
    # "COMM-TID [CPU] TS: funcgraph_entry: func=NAME depth=N"
    # "COMM-TID [CPU] TS: funcgraph_exit: func=NAME depth=N overrun=..."
    # trace-cmd prefixes lines of an instance with its name when the file has several buffers.
    line_re = re.compile(r"^\s*(?:(\S+):\s+)?\S*-(\d+)\s+\[\d+\]\s+\S+\s+(funcgraph_entry|funcgraph_exit):\s+func=(\S+)\s+depth=(\d+)")
    counts, stacks, errors, seen = {}, {}, [], 0
    for line in open(report, errors="replace"):
        if "UNKNOWN EVENT" in line:
            errors.append("an [UNKNOWN EVENT] line")
            continue
        m = line_re.search(line)
        if not m:
            continue
        seen += 1
        buf = m.group(1) or ""
        tid, kind, fn, depth = int(m.group(2)), m.group(3), norm_ours(m.group(4)), int(m.group(5))
        st = stacks.setdefault((buf, tid), [])
        if kind == "funcgraph_entry":
            counts[(buf, fn)] = counts.get((buf, fn), 0) + 1
            if depth != len(st):
                errors.append(f"{buf} thread {tid}: entry of {fn} at depth {depth}, {len(st)} frames open")
                del st[depth:]
            st.append((fn, depth))
        else:
            if not st:
                errors.append(f"{buf} thread {tid}: exit of {fn} at depth {depth} with no open entry")
                continue
            top = st.pop()
            if top != (fn, depth):
                errors.append(f"{buf} thread {tid}: exit of {fn} at depth {depth} closes {top[0]} at depth {top[1]}")
    # Frames still open at the end: only the outermost ones a thread never
    # left while recorded (main, a thread's start routine, exit()).
    write(out, counts)
    if not seen:
        errors.insert(0, "no funcgraph_entry/funcgraph_exit line")
    for e in errors[:15]:
        print(e, file=sys.stderr)
    return 1 if errors else 0


def function(report, out):
    # trace-cmd indents the name by the call depth it infers, and may add "<-- PARENT".
    line_re = re.compile(r"^\s*(?:(\S+):\s+)?\S*-\d+\s+\[\d+\].*?\sfunction:\s+(\S+)")
    counts = {}
    for line in open(report, errors="replace"):
        m = line_re.search(line)
        if m:
            key = (m.group(1) or "", norm_ours(m.group(2)))
            counts[key] = counts.get(key, 0) + 1
    write(out, counts)
    return 0 if counts else 1


def uftrace(report, out):
    # With PROGRAM: only the functions it defines. The -finstrument-functions
    # hooks around an inlined function that another object defines pass that
    # object's address: clang's around glibc's extern-inline tolower (libc's
    # tolower), g++'s around std::string's members at -O2 (extern templates:
    # libstdc++'s basic_string<char>::size, while the program defines its own
    # basic_string<unsigned char>::size). uftrace counts them; usrtrace traces
    # the functions of the objects that define them
    # (available_filter_functions), and the libraries are not traced. The
    # report is uftrace's --demangle=full, so that a template's instances are
    # told apart; a name without template arguments that the program defines
    # in another spelling is kept by its normalized name.
    own = set(SYMBOLS.values())
    counts = {}
    for line in open(report, errors="replace"):
        m = re.match(r"^\s*(\d+)\s+(\S.*?)\s*$", line)
        if not m:
            continue
        full = m.group(2)
        if own and canonical(full) not in DEFINED and ("<" in full or norm(full) not in own):
            continue
        key = ("", norm(full))
        counts[key] = counts.get(key, 0) + int(m.group(1))
    write(out, counts)
    return 0 if counts else 1


def profile(report, out):
    # "  TOTAL UNIT  SELF UNIT  CALLS  AVG UNIT  MIN UNIT  MAX UNIT  NAME"; a
    # function none of whose calls returned has "-" for avg, min and max.
    time = r"(?:\S+ \S+|-)"
    line_re = re.compile(r"^\s*\S+ \S+\s+\S+ \S+\s+(\d+)\s+" + time + r"\s+" + time + r"\s+" + time + r"\s+(\S+)\s*$")
    counts = {}
    for line in open(report, errors="replace"):
        m = line_re.match(line)
        if m:
            key = ("", norm_ours(m.group(2)))
            counts[key] = counts.get(key, 0) + int(m.group(1))
    write(out, counts)
    return 0 if counts else 1


def stacks(report):
    print(sum(1 for line in open(report, errors="replace") if "user_stack:" in line))
    return 0


if __name__ == "__main__":
    mode = sys.argv[1]
    if len(sys.argv) > 4:
        load_symbols(sys.argv[4])
    if mode == "stacks":
        sys.exit(stacks(sys.argv[2]))
    sys.exit({"graph": graph, "function": function, "uftrace": uftrace, "profile": profile}[mode](sys.argv[2], sys.argv[3]))
