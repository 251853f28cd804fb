# Sourced by the probe tests that define the same uprobes in the kernel, the
# oracle (probe_lua_test.sh, probe_python_sdt_test.sh). Before sourcing:
# `test_name` (for the messages) and `group` (the kernel group the script's
# uprobes go in). Gives skip and fail (exit 77 and 1), T (the kernel's
# tracefs), and kernel_uprobes_open: tracefs mounted if need be, a skip
# when uprobe_events is not writable or setarch is missing, and the group's
# uprobes removed when the script exits, however it exits.
T=/sys/kernel/tracing

skip() { echo "$test_name: SKIP: $*"; exit 77; }
fail() { echo "$test_name: FAILED: $*" >&2; exit 1; }

# The kernel's uprobes stay defined if the script dies: remove ours.
kernel_uprobes_cleanup() {
  if [[ -e $T/events/$group/enable ]]; then echo 0 >"$T/events/$group/enable"; fi
  local l
  for l in $(grep -o "^[pr]:$group/[a-z_0-9]*" "$T/uprobe_events" 2>/dev/null || true); do
    echo "-:${l#*:}" >>"$T/uprobe_events" || true
  done
}

kernel_uprobes_open() {
  command -v setarch >/dev/null || skip "setarch is not installed"
  [[ -w $T/uprobe_events ]] || mount -t tracefs nodev $T 2>/dev/null || true
  [[ -w $T/uprobe_events ]] || skip "$T/uprobe_events is not writable (root, and tracefs mounted, are needed)"
  trap kernel_uprobes_cleanup EXIT
}
