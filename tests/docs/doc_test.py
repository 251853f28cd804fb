#!/usr/bin/env python3
"""Doc tests: the commands the documentation shows, run as a user runs them.

    doc_test.py --cmake CMAKE --build BUILD_DIR FILE.md...

Installs BUILD_DIR into a scratch prefix (`cmake --install`), puts its bin/
first on PATH and its usrtrace.pc on PKG_CONFIG_PATH, and then, per
Markdown file, in a scratch directory of its own:

- a fenced block whose info string names a file (```c++ file=app.cc) is
  written to that file, as a reader would save it;
- a ```console block's `$ COMMAND` lines (a trailing backslash continues a
  line) run in one bash per file, in order, so later blocks see what earlier
  ones made (files, `$!` of a job started with `&`); each must exit 0;
- the lines a console block shows under a command are what it must print
  (stdout and stderr together): each must match a line of the output, in
  order, blanks runs compared as one blank, `...` inside a line matching
  anything; a line that is only `...` stands for lines left out.
- `<!-- doc-test: COMMAND -->` lines right before a console block run
  first, unseen by readers (starting and waiting for a service, say; the
  man pages leave them out). $USRTRACE_SOURCE_DIR is the repository, for
  one that copies a test input the page uses.

The files the first Markdown file names (README.md's app.cc) are in every
scratch directory, so that other pages can run the README's program.

Blocks of any other kind are not run: they show code or output, not
commands. Background jobs still running at the end of a file are killed.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^(```+)(.*)$")
HIDDEN = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->$")


def parse(path):
    """[(kind, info, lines, hidden_commands)] of the fenced blocks in path."""
    blocks, hidden = [], []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = HIDDEN.match(lines[i].strip())
        if m:
            hidden.append(m.group(1))
            i += 1
            continue
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                hidden = []
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        blocks.append((info, body, hidden))
        hidden = []
    return blocks


def commands(body):
    """[(command, [expected lines])] of a console block."""
    out = []
    i = 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            if out:
                out[-1][1].append(line)
            i += 1
            continue
        cmd = line[2:]
        while cmd.endswith("\\") and i + 1 < len(body):
            i += 1
            cmd = cmd + "\n" + body[i]  # bash joins the lines
        out.append((cmd, []))
        i += 1
    return out


def squash(s):
    return re.sub(r"\s+", " ", s.strip())


def matches(expected, actual):
    """Every expected line, in order, against the actual lines."""
    want = [squash(e) for e in expected if e.strip() and e.strip() != "..."]
    got = [squash(a) for a in actual]
    j = 0
    for w in want:
        pattern = re.compile("^" + ".*".join(re.escape(p) for p in w.split("...")) + "$")
        while j < len(got) and not pattern.match(got[j]):
            j += 1
        if j == len(got):
            return w
        j += 1
    return None


def named_files(md):
    """{name: text} of the blocks of md that name a file."""
    out = {}
    for info, body, _ in parse(md):
        for w in info.split():
            if w.startswith("file="):
                out[w[5:]] = "\n".join(body) + "\n"
    return out


def run_file(md, env, work, shared):
    for name, text in list(shared.items()) + list(named_files(md).items()):
        with open(os.path.join(work, name), "w", encoding="utf-8") as f:
            f.write(text)
    steps = []
    for info, body, hidden in parse(md):
        words = info.split()
        if any(w.startswith("file=") for w in words):
            continue
        if words[:1] != ["console"]:
            continue
        for h in hidden:
            steps.append((h, [], True))
        for cmd, expected in commands(body):
            steps.append((cmd, expected, False))
    if not steps:
        return 0, 0
    marker = "__usrtrace_doc_test_%d__" % os.getpid()
    script = ["set -m"]  # jobs of their own, so that the end can kill them
    for n, (cmd, _, _) in enumerate(steps):
        script.append("echo %s %d" % (marker, n))
        script.append("{ %s\n} 2>&1 || { echo %s fail %d $?; exit 1; }" % (cmd, marker, n))
    script.append("echo %s end" % marker)
    script.append('for j in $(jobs -p); do kill -- -"$j" 2>/dev/null; done; wait 2>/dev/null; true')
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=600, check=False)
    text = proc.stdout.decode("utf-8", "replace")
    outputs, cur, failed, ended = {}, None, None, False
    for line in text.split("\n"):
        if line.startswith(marker):
            parts = line.split()
            if parts[1] == "fail":
                failed = (int(parts[2]), parts[3])
            elif parts[1] == "end":
                ended = True
            else:
                cur = int(parts[1])
                outputs[cur] = []
            continue
        if cur is not None:
            outputs[cur].append(line)
    errors = 0
    for n, (cmd, expected, hidden) in enumerate(steps):
        shown = ("(hidden) " if hidden else "$ ") + cmd.replace("\n", " ")
        if failed and failed[0] == n:
            print("FAIL %s: %s exited %s; it printed:\n  %s" % (md, shown, failed[1],
                                                              "\n  ".join(outputs.get(n, []))))
            return len(steps), errors + 1
        if n not in outputs:
            print("FAIL %s: %s did not run" % (md, shown))
            return len(steps), errors + 1
        missing = matches(expected, outputs[n])
        if missing is not None:
            print("FAIL %s: %s does not print\n  %s\nit printed:\n  %s" % (md, shown, missing,
                                                                       "\n  ".join(outputs[n][:40])))
            errors += 1
        else:
            print("ok   %s: %s" % (os.path.basename(md), shown[:100]))
    if not ended and not errors:
        print("FAIL %s: the commands did not all run (bash exited %d)" % (md, proc.returncode))
        errors += 1
    return len(steps), errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmake", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="usrtrace-doctest.")
    try:
        prefix = os.path.join(scratch, "prefix")
        subprocess.run([args.cmake, "--install", args.build, "--prefix", prefix], check=True,
                       stdout=subprocess.DEVNULL)
        pcs = [os.path.join(d, f) for d, _, fs in os.walk(prefix) for f in fs if f == "usrtrace.pc"]
        libdir = os.path.dirname(os.path.dirname(pcs[0]))
        env = dict(os.environ)
        env["PATH"] = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "")
        env["PKG_CONFIG_PATH"] = os.path.dirname(pcs[0])
        # Where a user's /usr install needs nothing: the scratch prefix is not
        # on the loader's path.
        env["LD_LIBRARY_PATH"] = libdir
        env.pop("USRTRACE_PRELOAD", None)
        # For a hidden command that copies a test input the page uses.
        env["USRTRACE_SOURCE_DIR"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        total = errors = 0
        shared = named_files(args.files[0])
        for k, md in enumerate(args.files):
            work = os.path.join(scratch, "work-%d-%s" % (k, os.path.basename(md)))
            os.makedirs(work)
            n, e = run_file(md, env, work, shared)
            total += n
            errors += e
        if total == 0:
            print("doc_test: no console block in %s" % " ".join(args.files))
            return 1
        print("doc_test: %d commands, %d failed" % (total, errors))
        return 1 if errors else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
