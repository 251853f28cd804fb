// Dynamic probes (src/probe, src/patch) against the kernel's uprobes on the
// same function of the same binary, in one run so that the ratios hold
// (bench/README.md):
//
//   BM_Unprobed           probe_bench_target(i), nothing armed: the baseline
//   BM_EventWrite         the call and a typed event with the probe's record
//                         (ip, x), compiled in: the ideal a probe can reach
//   BM_PatchEmptyHandler  the patch engine alone: the function's slot
//                         (detour) with an empty handler
//   BM_ProbeRecorded      `p:bench/hit probe_bench_target x=%di:s32`, enabled:
//                         a hit, its fetch and the record (detour)
//   BM_ProbeFilteredOut   the same with the filter "x < 0" (every record fails)
//   BM_KernelUprobe       the kernel's uprobe on the same function, the same
//                         argument fetched, enabled (root and tracefs needed;
//                         skipped otherwise)
//   BM_EventWriteThreads, BM_ProbeRecordedThreads
//                         BM_EventWrite and BM_ProbeRecorded on 1 and 2
//                         threads, each pinned to a CPU of its own: the
//                         rate should double
//
// The targets: BM_ProbeRecorded <= 50 ns and >= 20x below
// BM_KernelUprobe. The site is a detour (a jmp to its slot, no trap:
// docs/design/patch-engine.md); the int3 fallback is the same binary run
// with USRTRACE_PROBE_INT3=1. Single thread, pinned to the first CPU of the
// process. Run with --benchmark_enable_random_interleaving and repetitions
// (bench/run.sh does): this machine's speed drifts by tens of percent over
// seconds, and interleaved medians keep the ratios.
#include <benchmark/benchmark.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "instance/instance.h"
#include "patch/patch.h"
#include "pin.h"
#include "symbols/symbols.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

extern "C" int probe_bench_target(int x);

// The same record as the probe's (common header, __probe_ip, x), written by
// code compiled into the program: the ideal a probe is measured against.
USRTRACE_EVENT(bench, typed, (uint64_t, ip)(int32_t, x), "ip=%llx x=%d",
               static_cast<unsigned long long>(REC->ip), REC->x)

namespace {

using usrtrace::bench::Pin;
using usrtrace::instance::Instance;
namespace tracefs = usrtrace::tracefs;

// Keeps the calls from being folded away.
volatile int g_sink;

int define(const std::string& line) {
  return static_cast<int>(tracefs::write_file("uprobe_events", line, true));
}

void run_ours(benchmark::State& state, const char* filter) {
  Pin pin;
  Instance* top = Instance::top();
  if (!top) return state.SkipWithError("no rseq");
  top->buffer().reset();
  if (define("p:bench/hit probe_bench_target x=%di:s32") < 0) return state.SkipWithError("probe refused");
  if (filter && tracefs::write_file("events/bench/hit/filter", filter, false) < 0)
    return state.SkipWithError("filter refused");
  if (tracefs::write_file("events/bench/hit/enable", "1", false) < 0)
    return state.SkipWithError("enable refused");
  int i = 0;
  for (auto _ : state) g_sink = probe_bench_target(i++);
  tracefs::write_file("events/bench/hit/enable", "0", false);
  define("-:bench/hit");
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_Unprobed(benchmark::State& state) {
  Pin pin;
  int i = 0;
  for (auto _ : state) g_sink = probe_bench_target(i++);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
// The engine alone: the site's slot and an empty handler.
void empty_handler(const usrtrace::patch::Regs*, void*) {}
void BM_PatchEmptyHandler(benchmark::State& state) {
  Pin pin;
  namespace patch = usrtrace::patch;
  const auto at = reinterpret_cast<uintptr_t>(&probe_bench_target);
  // The function's bounds, as a probe has them from the symbol table.
  uint64_t size = 0;
  for (const usrtrace::symbols::Symbol& sym : usrtrace::symbols::load_process_symbols())
    if (sym.addr == at && sym.name == "probe_bench_target") size = sym.size;
  if (size == 0) return state.SkipWithError("no symbol for the target");
  patch::Method how{};
  std::string err;
  if (patch::add(at, at, size, empty_handler, nullptr, &how, &err) < 0)
    return state.SkipWithError(err.c_str());
  int i = 0;
  for (auto _ : state) g_sink = probe_bench_target(i++);
  patch::remove(at, empty_handler, nullptr);
  state.SetLabel(patch::method_name(how));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
void BM_EventWrite(benchmark::State& state) {
  Pin pin;
  Instance* top = Instance::top();
  if (!top) return state.SkipWithError("no rseq");
  top->buffer().reset();
  top->set_event("bench", "typed", true);
  const auto ip = reinterpret_cast<uint64_t>(&probe_bench_target);
  int i = 0;
  for (auto _ : state) {
    g_sink = probe_bench_target(i);
    trace_bench_typed(ip, i++);
  }
  top->set_event("bench", "typed", false);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
void BM_ProbeRecorded(benchmark::State& s) { run_ours(s, nullptr); }
void BM_ProbeFilteredOut(benchmark::State& s) { run_ours(s, "x < 0"); }

// Several threads on their own CPUs hitting one probe (or writing the
// typed event): the per-hit cost should not grow with them. The site
// table's readers are per-CPU counters (SRCU, src/patch/patch.cc), so no
// line is shared between the threads' hits but the event's own. Set up and
// torn down once around all the threads (Setup/Teardown).
void probe_setup(const benchmark::State&) {
  Instance::top()->buffer().reset();
  define("p:bench/hit probe_bench_target x=%di:s32");
  tracefs::write_file("events/bench/hit/enable", "1", false);
}
void probe_teardown(const benchmark::State&) {
  tracefs::write_file("events/bench/hit/enable", "0", false);
  define("-:bench/hit");
}
void event_setup(const benchmark::State&) {
  Instance::top()->buffer().reset();
  Instance::top()->set_event("bench", "typed", true);
}
void event_teardown(const benchmark::State&) { Instance::top()->set_event("bench", "typed", false); }
void BM_ProbeRecordedThreads(benchmark::State& state) {
  Pin pin(usrtrace::bench::nth_cpu(static_cast<size_t>(state.thread_index())));
  int i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(probe_bench_target(i++));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
void BM_EventWriteThreads(benchmark::State& state) {
  Pin pin(usrtrace::bench::nth_cpu(static_cast<size_t>(state.thread_index())));
  const auto ip = reinterpret_cast<uint64_t>(&probe_bench_target);
  int i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(probe_bench_target(i));
    trace_bench_typed(ip, i++);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// The file offset of `fn` in this program, as uprobe_events takes it.
bool file_offset(const void* fn, std::string* path, unsigned long* off) {
  char buf[PATH_MAX];
  if (realpath("/proc/self/exe", buf) == nullptr) return false;
  *path = buf;
  struct Arg {
    uintptr_t addr;
    unsigned long off;
    bool found;
  } a{reinterpret_cast<uintptr_t>(fn), 0, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* p) {
        auto* q = static_cast<Arg*>(p);
        if (q->found) return 1;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && q->addr >= lo && q->addr < lo + ph.p_filesz) {
            q->off = q->addr - lo + ph.p_offset;
            q->found = true;
          }
        }
        return 1;  // the program is the first object
      },
      &a);
  *off = a.off;
  return a.found;
}

bool kernel_write(const char* file, const std::string& text) {
  const std::string path = std::string("/sys/kernel/tracing/") + file;
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

void BM_KernelUprobe(benchmark::State& state) {
  Pin pin;
  std::string path;
  unsigned long off = 0;
  if (!file_offset(reinterpret_cast<const void*>(&probe_bench_target), &path, &off))
    return state.SkipWithError("no file offset");
  char line[PATH_MAX + 128];
  snprintf(line, sizeof line, "p:usrtrace_bench/hit %s:0x%lx x=%%di:s32\n", path.c_str(), off);
  kernel_write("uprobe_events", "-:usrtrace_bench/hit\n");
  if (!kernel_write("uprobe_events", line) || !kernel_write("events/usrtrace_bench/hit/enable", "1"))
    return state.SkipWithError("the kernel's uprobe_events is not writable (root, tracefs)");
  int i = 0;
  for (auto _ : state) g_sink = probe_bench_target(i++);
  kernel_write("events/usrtrace_bench/hit/enable", "0");
  kernel_write("uprobe_events", "-:usrtrace_bench/hit\n");
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

BENCHMARK(BM_Unprobed);
BENCHMARK(BM_EventWrite);
BENCHMARK(BM_PatchEmptyHandler);
BENCHMARK(BM_ProbeRecorded);
BENCHMARK(BM_ProbeFilteredOut);
BENCHMARK(BM_KernelUprobe);
BENCHMARK(BM_EventWriteThreads)
    ->Setup(event_setup)
    ->Teardown(event_teardown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_ProbeRecordedThreads)
    ->Setup(probe_setup)
    ->Teardown(probe_teardown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
