// Exact instructions per traced call, under callgrind (bench/run.sh):
//
//   valgrind --tool=callgrind --toggle-collect=fb_ideal_loop function_instr ideal N
//
// MODE is plain (a), ideal (b), graph (c: function_graph, the leaf in the
// filter), filtered (d: function_graph, the leaf outside the filter) or
// patch (e: patchable entries, no tracer). Each runs one loop of N calls of its
// case's leaf; the loop function is what --toggle-collect names (the loop and
// everything it calls: the leaf and the hooks). run.sh takes N and 2N and
// reports (Ir(2N) - Ir(N)) / N.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/rseq.h"
#include "function_workload.h"
#ifdef USRTRACE_BENCH_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#endif
#include "usrtrace/usrtrace.h"

namespace {

bool write_file(const char* path, const char* text) {
  long r = usrtrace_tracefs_write(path, text, strlen(text));
  if (r < 0) {
    fprintf(stderr, "function_instr: echo '%s' > %s: %s\n", text, path, strerror(static_cast<int>(-r)));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: function_instr plain|ideal|graph|filtered|patch N\n");
    return 2;
  }
  const char* mode = argv[1];
  const long n = atol(argv[2]);
#ifdef USRTRACE_BENCH_HAVE_VALGRIND_H
  // valgrind has no rseq: one thread, a fixed CPU (as instr_count does).
  if (RUNNING_ON_VALGRIND) usrtrace::base::rseq_emulate_for_instrumentation();
#endif
  long sink = 0;
  if (!strcmp(mode, "plain")) {
    sink = fb_plain_loop(n);
  } else if (!strcmp(mode, "ideal")) {
    sink = fb_ideal_loop(n);
  } else if (!strcmp(mode, "graph") || !strcmp(mode, "filtered")) {
    if (!write_file("set_ftrace_filter", "fb_cyg_leaf") || !write_file("current_tracer", "function_graph")) {
      return 1;
    }
    sink = !strcmp(mode, "graph") ? fb_cyg_loop(n) : fb_cyg_other_loop(n);
  } else if (!strcmp(mode, "patch")) {
    sink = fb_patch_loop(n);
  } else {
    fprintf(stderr, "function_instr: unknown mode %s\n", mode);
    return 2;
  }
  printf("%ld\n", sink);
  return 0;
}
