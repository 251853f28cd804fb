// Writer threads: the read side of usrtrace's grace periods, and each
// thread's identity (tid, comm) for the trace.
//
// Every thread that writes an event brackets the write with its own nesting
// counter (a plain per-thread word, no atomic instruction):
//
//     nesting++            [A]
//     load instance slot   [B]   (the mask, the ring buffer, the pid filter)
//     write                [C]
//     nesting--            [D]
//
// synchronize_writers() (the update side) is called after a pointer was
// unpublished: membarrier(PRIVATE_EXPEDITED) runs a full barrier on every
// running thread of the process, and then every registered thread's counter
// is waited on until it is seen at 0. A writer that stored [A] before the
// barrier is seen nonzero until [D]; one that stores [A] after it loads [B]
// after the unpublishing store was visible, so it cannot find the old
// pointer. (This is liburcu's "memb" flavour, with a counter instead of a
// grace-period phase; a thread that writes without pause is still seen at 0
// between two writes.)
//
// A signal handler that writes while its thread is between [A] and [D] nests:
// the counter is then 2, which is also how the trace shows the nesting (the
// 'h' flag and the preempt-depth column, src/output).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace usrtrace::writers {

struct ThreadState {
  std::atomic<uint32_t> nesting{0};  // written by the thread only
  int32_t tid = 0;
  // kUnregistered -> kRegistering -> kRegistered, and back to kUnregistered
  // when the thread exits. Written by the thread only (and its signal
  // handlers, which see kRegistering if they interrupt registration).
  uint8_t state = 0;
  ThreadState* next = nullptr;  // registry list
};
inline constexpr uint8_t kUnregistered = 0;
inline constexpr uint8_t kRegistering = 1;
inline constexpr uint8_t kRegistered = 2;

// This thread's state. Context: any; async-signal-safe.
ThreadState& self();
// Registers the calling thread (first event): tid, comm, list. Returns
// false if a signal handler interrupted the thread's own registration (the
// event is then dropped: the thread is not yet visible to grace periods).
// Context: any thread, signal handlers included; a few system calls, no
// allocation.
bool register_self(ThreadState& t);

// [A] of the protocol above. nullptr: drop the event (see register_self).
inline ThreadState* enter() {
  ThreadState& t = self();
  if (__builtin_expect(t.state != kRegistered, 0) && !register_self(t)) return nullptr;
  // order: relaxed; the ordering against loads of published pointers comes
  // from the membarrier in synchronize_writers() (see above).
  t.nesting.store(t.nesting.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return &t;
}
inline void exit(ThreadState& t) {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t.nesting.store(t.nesting.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

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

}  // namespace usrtrace::writers
