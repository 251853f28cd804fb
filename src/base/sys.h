// Thin, async-signal-safe wrappers around the system calls usrtrace's control
// plane needs. None of these is ever reached from the event write fast path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace usrtrace::base {

// Number of CPU ids the kernel may hand out (from /sys/devices/system/cpu/possible);
// every rseq cpu_id is below it. Context: any thread; cached after the first call.
int nr_possible_cpus();

// Thread id (what ftrace calls the pid). Context: async-signal-safe.
int gettid_cached();

// Names the calling thread, one of usrtrace's own (control server, recorder),
// with prctl rather than pthread_setname_np: usrtrace interposes that, and
// its own threads must not put thread_rename events into the program's trace.
void name_own_thread(const char* name);

// Counts the changes to what a trace's metadata describes (events registered
// or removed, objects loaded or unloaded): a recorder that took the metadata
// at another count takes it again (control server, kMetaChanged).
// Context: any.
uint32_t metadata_generation();
void metadata_changed();

// Futex wait on `word` while it equals `expected`; returns on wake, signal or
// spurious wake-up (callers loop). Context: may sleep.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms = -1);
// Wakes every waiter on `word`. Context: async-signal-safe, one system call.
void futex_wake_all(std::atomic<uint32_t>* word);

// Memory for ring-buffer pages: `bytes` of zeroed anonymous memory aligned to
// `align` (a power of two >= the system page size). Returns nullptr on failure.
void* map_aligned(size_t bytes, size_t align);
void unmap_aligned(void* p, size_t bytes);

}  // namespace usrtrace::base
