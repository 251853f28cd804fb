// Writer threads: the read side of usrtrace's grace periods, and each
// thread's identity (tid, comm) for the trace.
//
// Every thread that writes an event brackets the write with its own counter
// word (a plain per-thread word, no atomic instruction):
//
//     ctr += depth ? 1 : 0x101   [A]  (depth+1; a new outermost write counted)
//     load instance slot         [B]  (the mask, the ring buffer, the pid filter)
//     write                      [C]
//     ctr -= 1                   [D]
//
// synchronize_writers() (the update side) is called after a pointer was
// unpublished: membarrier(PRIVATE_EXPEDITED) runs a full barrier on every
// running thread of the process, and then every registered thread is waited
// on until it is seen outside a write, or seen to have started a new
// outermost write (its write count moved). A writer that stored [A] before
// the barrier is seen inside until [D]; one that stores [A] after it loads
// [B] after the unpublishing store was visible, so it cannot find the old
// pointer. This is liburcu's "memb" flavour: the count plays the part of its
// grace-period phase, so a thread that writes without pause does not hold
// the update side up.
//
// The per-thread word `ctr`:
//
//   bits 63..8  outermost writes started (wraps; only compared for change)
//   bits 7..0   nesting depth: writes in progress on this thread
//
// A signal handler that writes while its thread is between [A] and [D] nests:
// the depth is then 2, which is also how the trace shows the nesting (the
// 'h' flag and the preempt-depth column, src/output).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace usrtrace::writers {

struct ThreadState {
  std::atomic<uint64_t> ctr{0};  // see above; written by the thread only
  uint32_t depth() const { return static_cast<uint32_t>(ctr.load(std::memory_order_relaxed) & 0xff); }
  int32_t tid = 0;
  // The thread's name (filters' `comm`), set at registration and by
  // pthread_setname_np on itself. A handler that interrupts a rename may
  // read a mix of both names.
  char comm[16] = {};
  // kUnregistered -> kRegistering -> kRegistered, and back to kUnregistered
  // when the thread exits. Written by the thread only (and its signal
  // handlers, which see kRegistering if they interrupt registration).
  uint8_t state = 0;
  ThreadState* next = nullptr;  // registry list
};
inline constexpr uint8_t kUnregistered = 0;
inline constexpr uint8_t kRegistering = 1;
inline constexpr uint8_t kRegistered = 2;

// This thread's state: initial-exec TLS, reached inline from the write
// path (no call, no TLS wrapper: constinit, trivially destroyed). Context:
// any; async-signal-safe.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadState t_state;
inline ThreadState& self() { return t_state; }
// Registers the calling thread (first event): tid, comm, list. Returns
// false if a signal handler interrupted the thread's own registration (the
// event is then dropped: the thread is not yet visible to grace periods).
// Context: any thread, signal handlers included; a few system calls, no
// allocation.
bool register_self(ThreadState& t);

// [A] of the protocol above. nullptr: drop the event (see register_self).
// [A] for a thread already registered (enter() checks that first).
// Returns the counter as stored: its low byte is the depth.
inline uint64_t begin(ThreadState& t) {
  // order: the ordering against loads of published pointers comes from the
  // membarrier in synchronize_writers() (see above). The release (a plain
  // store on x86, as relaxed is) makes what this thread did before happen
  // before the grace period that sees this value, in the C++ model and for
  // ThreadSanitizer, which does not know membarrier.
  const uint64_t c = t.ctr.load(std::memory_order_relaxed);
  const uint64_t n = c + ((c & 0xff) != 0 ? 1 : 0x101);
  t.ctr.store(n, std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return n;
}

inline ThreadState* enter() {
  ThreadState& t = self();
  if (__builtin_expect(t.state != kRegistered, 0) && !register_self(t)) return nullptr;
  begin(t);
  return &t;
}
inline void exit(ThreadState& t) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // order: release, paired with synchronize_writers()'s acquire loads: the
  // write's reads of published pointers happen before a free that follows.
  t.ctr.store(t.ctr.load(std::memory_order_relaxed) - 1, std::memory_order_release);
}

// What runs when a thread that wrote events exits, before it leaves the
// registry (its pthread key destructor): the write path installs its
// usrtrace:thread_exit event here (write/thread_events.cc), so that this
// level needs nothing from the levels above it (docs/design/layers.md).
// Context: control plane; the hook runs on the exiting thread.
using ThreadExitHook = void (*)(int tid);
void set_thread_exit_hook(ThreadExitHook hook);

// Waits until no writer can still use a pointer unpublished before the
// call. Context: control plane; may sleep; not from a writer.
void synchronize_writers();

// saved_cmdlines: the names of threads that wrote events.
// Context: control plane.
std::string comm_of(int tid);  // "<...>" when unknown
struct Cmdline {
  int tid;
  std::string comm;
};
std::vector<Cmdline> saved_cmdlines();
// Records a thread's name (at registration, and when it changes).
// Context: any; async-signal-safe.
void save_comm(int tid, const char* comm);

// Copies of the saved_cmdlines table kept elsewhere (buffer files: see
// persist/file_format.h CmdlineSlot, which has this layout): save_comm()
// writes every mirror too. add copies the current table in; remove returns
// once no save_comm() can still be writing into the mirror.
// Context: control plane.
inline constexpr int kSavedCmdlines = 1024;
struct MirrorSlot {
  std::atomic<uint32_t> seq;  // odd while written
  int32_t tid;
  char comm[16];
};
bool add_cmdline_mirror(MirrorSlot* slots);  // kSavedCmdlines slots; false if full
void remove_cmdline_mirror(MirrorSlot* slots);

}  // namespace usrtrace::writers
