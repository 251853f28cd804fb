// usrtrace ring buffer: per-CPU, lockless, kernel page format.
//
// Design (the long form is docs/design/ring-buffer.md)
// ====================================================
//
// One RingBuffer has a CpuBuffer per possible CPU. A CpuBuffer is a ring of N
// pages in the kernel's format (page_format.h) plus a PageMeta per page:
//
//      pages:  [ slot 0 ][ slot 1 ][ slot 2 ] ... [ slot N-1 ]
//                 seq 5     seq 6     seq 3          seq 4
//                            ^ tail (seq 6)  ^ oldest (seq 3)
//
// Pages are numbered by a per-CPU sequence, seq s lives in slot (s-1) % N.
// Writers fill the tail page and then move to the next slot, which holds the
// oldest page (overwrite mode) or, in discard mode, must already be read.
//
// Writers: restartable sequences, not atomics
// -------------------------------------------
// Everything a writer changes lives in the CPU's WriterState, and every change
// is made by an rseq critical section (base/rseq.h) running on that CPU and
// ending in one 16-byte store of {w0, last_ts}. The kernel aborts a critical
// section when it preempts, migrates or signals the thread, so the sections of
// one CPU are serialized as if the CPU had a lock, without one:
//
//   * a writer preempted or migrated mid-write restarts on its new CPU;
//   * a signal handler that writes while the interrupted code is mid-write
//     runs its own section to completion; the interrupted one restarts;
//   * a reader never sees a half-written event: the commit store is the last
//     instruction, and a section that did not reach it left only bytes past
//     the committed end, which the next section overwrites.
//
// The event is written into the ring inside the section, so there is no
// reserved-but-uncommitted state: reserve/fill/commit is offered on the
// caller's stack (Reservation) and commit copies it in one section; a
// discarded reservation never reaches the ring.
//
// WriterState word w0 (ABI with the assembly below and slow_path.cc):
//
//   bits 63..16  address of the next free byte in the tail page
//   bits 15..0   number of data entries in the tail page
//
//   last_ts      clock value of the last committed event on this CPU (the
//                running time at the end of the tail page)
//   limit        0, or the end of the page w0 points into, << 16: a new w0
//                must stay below it (w0 is strictly inside its page). Like
//                w0, written only by sections of this CPU, or by control
//                while the CPU is sealed.
//   sealed       nonzero: no section may commit (reset, resize, teardown)
//
// The gate: the fast path finds the WriterState through gates[cpu], which
// control points either at the CPU's own state (open) or at a shared closed
// state whose limit of 0 fails every write (closed). Closed sends every write
// to the slow path: sealed, absolute time stamps, a clock that is not the
// TSC, a reader waiting for any event. The slow path and its section find the
// CpuBuffer through slots[cpu], never through the gate.
//
// Fast path (write<N>, one section, 26 instructions for a 28-byte payload):
//
//   [A] arm rseq_cs; cpu = rseq.cpu_id; ws = gates[cpu]
//   [B] ts = rdtsc; delta = ts - last_ts; delta >= 2^27 -> slow path
//   [C] nw = w0 + (entry << 16 | 1); nw >= limit -> slow path (page full,
//       or the gate is closed)
//   [D] store header word and payload at w0 >> 16
//   [E] commit: store {nw, ts}
//
// Interrupted anywhere in [A]..[E] before the commit store, the section
// restarts from [A] and rereads everything; nothing before [E] is visible to
// a reader because readers only read up to the committed w0.
//
// Slow path (slow_path.cc): page switches, time extends, absolute stamps,
// other clocks, drops. It computes a list of stores in C++ from a snapshot of
// {w0, last_ts} and hands it to one generic section that checks the CPU, the
// installed CpuBuffer, `sealed` and the snapshot, then performs the stores and
// commits. A section that finds anything changed fails and the slow path
// starts again from a fresh snapshot.
//
// Page switch invariants (all stores of one section, in this order):
//   1. meta[next].seq = seq+1 before any byte of the next page changes, so a
//      reader that copied the old page sees the seq move and drops its copy;
//   2. meta[next].first_index = first_index(tail) + entries(tail): the count
//      of entries written on this CPU before the page, which makes the
//      accounting exact (a reader that finds pages gone adds the difference of
//      first indexes to `overrun`);
//   3. the closed page's commit length, the new page's header, limit = 0,
//      then the event, then the commit store moving w0 into the new page.
//   4. a second section then sets limit from w0 (rseq_fix_limit).
// The limit invariant (0 or w0's page) holds in every state a nested writer
// can see: a section interrupted mid-switch has set limit to 0 and not moved
// w0, and no section stores a nonzero limit for a page w0 is not in. A limit
// stored before w0 moved to another page would let a nested fast path write
// past the end of the old page.
// An aborted switch may leave meta[next] already pointing forward; readers
// only trust pages up to the tail's seq, so that is harmless. It is harmless
// only because next is never the tail's own slot: a reset CPU's w0 names the
// last slot, so even the first switch opens another (init_state).
//
// Readers (reader.cc) never block writers and never write the writer state.
// They copy a page and check its meta seq before and after (seqlock); the copy
// is the reader page of the kernel's design. A consuming reader publishes the
// index of the next entry it will consume (reader_index) so that discard
// mode never overwrites unread pages. Counting: written = first_index(tail) + entries(tail), and
// written == read + overrun + dropped + entries still in the buffer, exactly.
//
// Control (reset, resize, teardown) seals the CPU (sets sealed, closes the
// gate), then calls rseq_fence(): membarrier aborts every section in
// flight, so afterwards no writer can commit to the CPU. The slow path's C++
// part is counted in `slow_active_`, which control also waits to drain before
// touching memory the slow path reads.
//
// Swap (the base of snapshots) exchanges CpuBuffer pointers between two
// buffers in O(1): a write in flight lands in one of the two, never in
// neither.
//
// Storage (buffer_store.h): CpuBuffers, their PageMeta arrays and pages come
// from a BufferStore, anonymous memory by default. A file-backed store
// (persist/file_store.h) puts all three in a MAP_SHARED file, so the file
// holds every committed event when the process dies; each file-backed
// CpuBuffer has a role word in the file saying which buffer (tag) and CPU it
// currently serves, kept current by adopt_cpu().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/compiler.h"
#include "base/mutex.h"
#include "base/rseq.h"
#include "clock/trace_clock.h"
#include "ring_buffer/page_format.h"

namespace usrtrace::rb {

class BufferStore;
struct GrowPool;

enum class Mode : uint8_t { kOverwrite, kDiscard };

// Per page, beside the page. Written by writers inside switch sections,
// read by readers with seqlock checks on `seq`.
struct PageMeta {
  std::atomic<uint64_t> seq{0};          // page sequence; 0 = never written
  std::atomic<uint64_t> first_index{0};  // entries written on this CPU before this page
  std::atomic<uint64_t> missed{0};       // events dropped just before this page
  std::atomic<uint64_t> entries{0};      // data entries, once the page is closed
};

// ABI with the assembly: field offsets are asserted below.
struct alignas(64) WriterState {
  std::atomic<uint64_t> w0{0};
  std::atomic<uint64_t> last_ts{0};
  std::atomic<uint64_t> limit{0};
  std::atomic<uint32_t> sealed{1};
  uint32_t reserved_ = 0;
  // Dropped count already reported in a page's `missed`; written by switch
  // sections only.
  std::atomic<uint64_t> dropped_seen{0};
};
inline constexpr int kWsW0 = 0;
inline constexpr int kWsLastTs = 8;
inline constexpr int kWsLimit = 16;
inline constexpr int kWsSealed = 24;
inline constexpr int kWsDroppedSeen = 32;

// Reader-side position and page copy; lives with its CpuBuffer (so it moves
// with it on a swap). Guarded by CpuBuffer::reader_mu.
struct PageCopy {
  std::vector<uint8_t> page;  // header + data, page_size bytes
  uint64_t seq = 0;           // 0: no copy
  uint32_t len = 0;           // data bytes copied
  uint32_t entries = 0;       // data entries in those bytes
  uint64_t first_index = 0;
  uint64_t missed = 0;
  uint64_t end_ts = 0;  // running time at `len` (tail copies only)
  bool is_tail = false;
};

struct ReadPos {
  uint64_t seq = 0;             // page being read; 0 = start at the oldest
  uint32_t off = 0;             // data offset of the next unread entry in that page
  uint64_t ts = 0;              // running time at `off`
  uint64_t index = 0;           // per-CPU index of the next unread entry
  uint64_t pending_missed = 0;  // lost before the next entry, not yet reported
  bool lost_unknown = false;    // lost before the next entry, count unknown
};

struct alignas(64) CpuBuffer {
  WriterState ws;  // must stay first: the assembly addresses it from the pointer

  // Geometry; changes only while sealed.
  uint8_t* pages = nullptr;
  PageMeta* meta = nullptr;
  uint32_t nr_pages = 0;
  uint32_t page_size = 0;
  uint32_t page_shift = 0;
  int cpu = 0;

  // The O(1) clear of a buffer no writer targets (clear_detached(), for
  // snapshot spares): pages with a seq below floor_seq are invisible to
  // readers and the next write opens page floor_seq; floor_index and
  // floor_dropped are the counts at the clear, subtracted from statistics.
  // clear_gen counts clears; a reader whose reader_gen differs drops its
  // position first (under reader_mu). A full reset zeroes them all.
  std::atomic<uint64_t> floor_seq{0};
  std::atomic<uint64_t> floor_index{0};
  std::atomic<uint64_t> floor_dropped{0};
  std::atomic<uint64_t> clear_gen{0};
  // Where this CpuBuffer and its pages were allocated (it may move to
  // another RingBuffer on a swap, and is freed through its own store).
  BufferStore* store = nullptr;
  // File-backed only: this CpuBuffer's role word in the file (role_word());
  // nullptr for memory. Written by adopt_cpu() with plain stores.
  std::atomic<uint64_t>* role = nullptr;
  // Growth (grow.cc): kGrowNone for a CpuBuffer outside a growth pool,
  // else where it is in its life (GrowState). Shared with the recorder,
  // which alone moves it from kGrowRetired to kGrowDrained; a writer that
  // grows claims a spare or drained one with a CAS (grow.cc). grow_epoch orders
  // the CpuBuffers one CPU went through (the recorder drains them in that
  // order); unique across the CPUs of a pool.
  std::atomic<uint64_t> grow_state{0};
  std::atomic<uint64_t> grow_epoch{0};

  alignas(64) std::atomic<uint64_t> dropped{0};
  // Written by the consuming reader, read by switch slow paths: the page it
  // reads (for watermarks), and the index of the next entry it will consume
  // (discard mode reuses a page only once every entry in it is consumed).
  std::atomic<uint64_t> reader_next_seq{1};
  std::atomic<uint64_t> reader_index{0};

  base::Mutex reader_mu;
  ReadPos pos USRTRACE_GUARDED_BY(reader_mu);
  PageCopy copy USRTRACE_GUARDED_BY(reader_mu);
  uint64_t read USRTRACE_GUARDED_BY(reader_mu) = 0;
  uint64_t overrun USRTRACE_GUARDED_BY(reader_mu) = 0;
  uint64_t reader_gen USRTRACE_GUARDED_BY(reader_mu) = 0;

  uint8_t* page_at(uint64_t slot) const { return pages + (slot << page_shift); }
  uint64_t slot_of(uint64_t seq) const { return (seq - 1) % nr_pages; }
  // The tail page's slot. Context: the writer that just committed, or
  // anyone while the CPU is sealed.
  uint64_t slot_of_w0() const {
    auto* wp = reinterpret_cast<uint8_t*>(ws.w0.load(std::memory_order_relaxed) >> 16);
    return static_cast<uint64_t>(wp - pages) >> page_shift;
  }
};
static_assert(offsetof(WriterState, w0) == kWsW0);
static_assert(offsetof(WriterState, last_ts) == kWsLastTs);
static_assert(offsetof(WriterState, limit) == kWsLimit);
static_assert(offsetof(WriterState, dropped_seen) == kWsDroppedSeen);
static_assert(offsetof(WriterState, sealed) == kWsSealed);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<CpuBuffer*>) == 8);

// Where a reader finds a CpuBuffer's pages. In the writers' process these
// are the CpuBuffer's own fields (own_view); a recorder in another process
// maps the buffer's shared file (record/shared_buffers.cc) and sees the
// pages at other addresses, while w0 still holds the writers' addresses.
// A reader takes the geometry once per call, so a resize racing with it
// (the writers' process seals only its own readers out) can make it read
// stale pages of its own mapping, which the seqlock rejects, never memory
// outside the view.
struct PagesView {
  const uint8_t* pages = nullptr;  // slot 0, as this reader addresses it
  const PageMeta* meta = nullptr;
  uintptr_t writer_pages = 0;  // slot 0, as the writers' w0 addresses it
  uint32_t nr_pages = 0;
  uint32_t page_size = 0;
  uint32_t page_shift = 0;

  const uint8_t* page_at(uint64_t slot) const { return pages + (slot << page_shift); }
  uint64_t slot_of(uint64_t seq) const { return (seq - 1) % nr_pages; }
};
inline PagesView own_view(const CpuBuffer* cb) {
  return {cb->pages,    cb->meta,      reinterpret_cast<uintptr_t>(cb->pages),
          cb->nr_pages, cb->page_size, cb->page_shift};
}

// A consuming reader whose position is its own rather than the CpuBuffer's
// (pos/copy there are the in-process trace_pipe's and hold heap pointers of
// that process): a recorder in another process. Like the in-process
// consumer it publishes reader_next_seq and reader_index in the CpuBuffer,
// so discard mode waits for it. Two consumers of one CPU split its events
// between them, as two trace_pipe readers do.
struct ExternalConsumer {
  ReadPos pos;
  PageCopy copy;
  uint64_t read = 0;     // entries handed out
  uint64_t overrun = 0;  // entries lost before they were read
  uint64_t gen = 0;      // the CpuBuffer's clear_gen this position belongs to
  bool started = false;
};
// read_page (below) for an external consumer: the rest of its current page
// in the kernel's format, into `out`; the data length, 0 when none (or
// only the open tail page, with `full_only`). Context: the consumer's one
// thread; lock-free against writers and other readers.
uint32_t read_page_external(CpuBuffer* cb, const PagesView& v, ExternalConsumer* r, uint8_t* out,
                            size_t out_size, bool full_only);

// per_cpu/cpuN/stats.
struct CpuStats {
  uint64_t entries = 0;          // events in the buffer, not yet read or lost
  uint64_t overrun = 0;          // events lost to overwrite
  uint64_t commit_overrun = 0;   // always 0: no entry is ever reserved uncommitted
  uint64_t bytes = 0;            // bytes of unread data
  uint64_t oldest_event_ts = 0;  // raw clock value (0 when empty)
  uint64_t now_ts = 0;           // raw clock value
  uint64_t dropped_events = 0;   // discard mode: events refused while full
  uint64_t read_events = 0;
  uint64_t written = 0;  // events ever committed (not in the kernel's file)
};

struct Options {
  uint32_t page_size = 4096;        // sub-buffer size, power of two 4 KiB..64 KiB
  uint64_t size_per_cpu = 1441792;  // data bytes per CPU (the kernel's default 1408 KiB)
  Mode mode = Mode::kOverwrite;
  clock::ClockId clock = clock::ClockId::kLocal;
  // Where CpuBuffers and pages live; nullptr: anonymous memory.
  std::shared_ptr<BufferStore> store;
  // Which buffer of its instance this is (0: the live one; snapshots use
  // others); recorded in a file-backed store's role words.
  uint32_t tag = 0;
};

// A file-backed CpuBuffer's role word: 0 = unowned, else (tag + 1) << 32 | cpu.
constexpr uint64_t role_word(uint32_t tag, int cpu) {
  return (uint64_t{tag} + 1) << 32 | static_cast<uint32_t>(cpu);
}

// CpuBuffer::grow_state. A pool's CpuBuffer goes spare -> live (installed
// for a CPU) -> retired (full of pages the recorder has not taken; no
// write can land in it any more) -> drained (the recorder took them all)
// -> live again, cleared in O(1).
enum GrowState : uint64_t {
  kGrowNone = 0,
  kGrowSpare = 1,
  kGrowLive = 2,
  kGrowRetired = 3,
  kGrowDrained = 4,
};
// The tag in a retired CpuBuffer's role word (role_word(kRetiredTag, cpu)):
// no buffer has it, so a recorder looking for the live CPU never takes it.
inline constexpr uint32_t kRetiredTag = 0xfffffffeu;

// One event as readers return it.
struct Event {
  int cpu = 0;
  uint64_t ts = 0;                // raw clock value
  const uint8_t* data = nullptr;  // valid until the next read on that CPU
  uint32_t len = 0;               // as stored (a multiple of 4)
  uint64_t missed_before = 0;     // events lost on this CPU right before this one
  bool lost_before = false;       // some were lost (count may be 0 if unknown)
};

class RingBuffer {
 public:
  // Returns nullptr and sets *err (an errno) when the options are invalid
  // (EINVAL), memory is short (ENOMEM) or the system lacks rseq (ENOSYS).
  static std::unique_ptr<RingBuffer> create(const Options& opts, int* err = nullptr);
  ~RingBuffer();
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;
  static void operator delete(void* p);

  // ---- Write path. Context: any thread, signal handlers included;
  // ---- async-signal-safe; no lock, no allocation, no system call.

  // Records `kLen` bytes at `payload` as one event. Returns false when the
  // buffer is off, sealed, full in discard mode, or the event is too large.
  template <uint32_t kLen>
  bool write(const void* payload);
  // Same for a length known at run time (out of line).
  bool write(const void* payload, uint32_t len);
  // write() with the time stamp read by the caller (a raw TSC value) instead
  // of inside the section, for a writer that also needs the time in the
  // payload (function_graph's calltime/rettime) without a second rdtsc.
  // The stamp may be older than another thread's later commit on the same
  // CPU (the caller was preempted between rdtsc and the write): the section
  // then sees time go back and the slow path stamps the event with the
  // CPU's last time instead, keeping each CPU's times monotonic. For a
  // buffer whose clock is not a TSC clock the stamp is ignored and the
  // clock read as for write().
  template <uint32_t kLen>
  bool write_at(const void* payload, uint64_t tsc);
  bool write_at(const void* payload, uint32_t len, uint64_t tsc);  // out of line

  // ---- Control. Context: any thread but not signal handlers, unless noted.

  // ring_buffer_record_on/off: a soft switch; a write in flight may land.
  // Context: async-signal-safe.
  void record_on() { record_disabled_.store(0, std::memory_order_relaxed); }
  void record_off() { record_disabled_.store(1, std::memory_order_relaxed); }
  bool record_is_on() const { return record_disabled_.load(std::memory_order_relaxed) == 0; }

  void set_mode(Mode m) { mode_.store(m, std::memory_order_relaxed); }
  Mode mode() const { return mode_.load(std::memory_order_relaxed); }

  // Changes the clock; resets the buffer (as writing trace_clock does).
  void set_clock(clock::ClockId id);
  clock::ClockId clock() const { return clock_.load(std::memory_order_relaxed); }

  // Precede every event with an absolute time stamp (type 31) entry.
  void set_time_stamp_abs(bool on);
  bool time_stamp_abs() const { return abs_ts_.load(std::memory_order_relaxed); }

  // buffer_size_kb: data bytes per CPU (cpu < 0: every CPU). Keeps the newest
  // events that fit; events it cannot keep count as overrun. Returns 0 or
  // -EINVAL/-ENOMEM.
  int resize(int cpu, uint64_t bytes);
  // Empties the buffer of one CPU (cpu < 0: all) and zeroes its counters.
  void reset(int cpu = -1);
  // Exchanges this buffer's pages for CPU `cpu` (cpu < 0: all) with `other`'s,
  // in O(1). Both must use the same clock and the same store (options().store).
  // Returns 0 or -EINVAL.
  int swap_cpu(RingBuffer& other, int cpu);

  // ---- The control lock, and work deferred to its holder: the base of
  // ---- async-signal-safe snapshots (docs/design/snapshots.md).
  class ControlGuard;
  // Proof that the caller holds the control lock: a ControlGuard converts to
  // one, and the deferred function is handed one.
  class Locked {
    friend class RingBuffer;
    Locked() = default;
  };
  using DeferredFn = void (*)(void* arg, const Locked& held);
  // Sets the function run_deferred() runs, with the control lock held.
  // Context: control plane, before any run_deferred().
  void set_deferred(DeferredFn fn, void* arg) {
    deferred_fn_ = fn;
    deferred_arg_ = arg;
  }
  // Runs the deferred function with the control lock held: now if the lock
  // is free, otherwise when its holder releases it (the holder may be the
  // thread this signal handler interrupted). Requests that arrive while one
  // is pending are merged into one run; the function drains its own queue.
  // Context: any thread, signal handlers included; lock-free.
  void run_deferred();
  // As swap_cpu(other, cpu) for a holder of this buffer's control lock that
  // makes sure nothing else controls `other` meanwhile (snapshot spares are
  // managed only under their live buffer's lock). A write in flight lands in
  // one of the two buffers. Returns 0 or -EINVAL. Context: async-signal-safe.
  int swap_locked(const Locked& held, RingBuffer& other, int cpu);
  // Empties CPU `cpu` (cpu < 0: all) of a buffer that no writer targets (a
  // snapshot spare) in O(1): what it holds becomes invisible to readers and
  // statistics, and its next write opens a fresh page.
  // Context: async-signal-safe.
  void clear_detached(int cpu = -1);
  // resize() and set_clock() for a holder of the control lock.
  int resize_locked(const Locked& held, int cpu, uint64_t bytes);
  void set_clock_locked(const Locked& held, clock::ClockId id);
  // Records in the store that the CpuBuffer now installed for `cpu` serves
  // this buffer (its tag) on that CPU. swap_cpu() calls it for both buffers;
  // any other code that moves CpuBuffers between buffers must too.
  // Context: any thread; async-signal-safe (plain stores; no lock).
  void adopt_cpu(int cpu) {
    CpuBuffer* cb = cpu_buffer(cpu);
    // order: relaxed is enough; the role is only read after the process is
    // gone (or by a recovery of a quiescent file).
    if (cb && cb->role) cb->role->store(role_word(tag_, cpu), std::memory_order_relaxed);
  }
  uint32_t tag() const { return tag_; }
  // The store this buffer allocates from (nullptr: anonymous memory).
  const std::shared_ptr<BufferStore>& store() const { return store_; }

  // ---- Growth (grow.cc; docs/design/ring-buffer.md, "Growth"): a buffer
  // ---- whose pages an external consumer takes (`usrtrace record`) swaps
  // ---- in a fresh CpuBuffer instead of overwriting pages not yet taken.

  // Makes this buffer grow into `spares` more CpuBuffers of `pages_each`
  // pages (from its store: a sparse memfd costs only what is written),
  // shared by all CPUs. Once every spare holds pages not yet taken, the
  // ring overwrites (or, in discard mode, drops) as before, and counts it.
  // 0 or -ENOMEM (nothing is kept then) / -EINVAL. Context: control plane,
  // before the buffer is published to writers.
  int enable_growth(uint32_t spares, uint32_t pages_each);
  bool grows() const { return grow_.load(std::memory_order_relaxed) != nullptr; }
  // Growth of every buffer in the process stops (true) or goes on: a
  // buffer whose recorder is gone would otherwise grow up to its cap for
  // nobody. The control server pauses it when its last recorder leaves.
  // Context: any thread.
  static void pause_growth(bool paused);
  // Growth so far: CpuBuffers installed, and page switches that found no
  // spare (the pool was exhausted) or the control lock busy.
  struct GrowStats {
    uint64_t grown = 0;
    uint64_t no_spare = 0;
    uint64_t busy = 0;
    uint32_t pool = 0;         // CpuBuffers in the pool, the first live ones included
    uint64_t spare_bytes = 0;  // pages of the pool's CpuBuffers, less the first live ones'
  };
  GrowStats grow_stats() const;

  // Raw clock value at the last reset of every CPU (reset(-1), set_clock),
  // 0 for a buffer never reset: the kernel's time_start, the base of the
  // latency-format times.
  uint64_t time_start() const { return time_start_.load(std::memory_order_relaxed); }

  int nr_cpus() const { return nr_cpus_; }
  uint32_t page_size(int cpu) const;
  uint32_t nr_pages(int cpu) const;
  // Data bytes the CPU's buffer holds (what buffer_size_kb reports, in bytes).
  uint64_t size_bytes(int cpu) const;
  CpuStats stats(int cpu);

  // ---- Readers (reader.cc). Context: reader threads; each CPU's read state
  // ---- is under its own mutex, so readers never block writers.

  // trace_pipe: the next event in time order across CPUs (cpu < 0) or of one
  // CPU, consumed. False when none is available now.
  bool consume(Event* ev, int cpu = -1);
  // The same, with the event's bytes copied into `copy` (at least the
  // largest entry: page_size bytes) before the reader lock is let go, so
  // that they stay valid while another consumer of the CPU (trace_pipe_raw
  // next to trace_pipe) reads on; ev->data points into `copy`.
  bool consume_copy(Event* ev, int cpu, uint8_t* copy, size_t copy_size);
  // Like consume but leaves the event in place.
  bool peek(Event* ev, int cpu = -1);

  // trace_pipe_raw: hands out the next page of `cpu` as the kernel does, into
  // `out` (at least page_size bytes). With full_only, only closed pages (no
  // page the writer is still filling). Returns the data bytes handed out, or
  // 0 when there is nothing.
  uint32_t read_page(int cpu, uint8_t* out, size_t out_size, bool full_only);

  // Blocks until `cpu` (cpu < 0: any CPU) has data: with percent == 0 any
  // event, otherwise until that percentage of its pages is filled and unread
  // (buffer_percent). Returns false if woken by wake_waiters() without data,
  // or when `timeout_ms` (>= 0) passed first.
  bool wait(int cpu, int percent, int timeout_ms = -1);
  // Wakes every waiter (for shutting down a reader). Context: async-signal-safe.
  void wake_waiters();

  // The non-consuming view (the `trace` file): iterates events from the
  // oldest unread one to the newest, merged by time, while writers go on.
  class Iterator;
  // The same view for a fatal signal's handler (src/crash): no lock, no
  // allocation.
  class DumpIterator;

 private:
  friend class Iterator;
  friend class DumpIterator;
  friend struct SlowPath;
  RingBuffer() = default;

  // Two arrays follow the object, each indexed by cpu + kTrapSlots: the
  // gates (what the fast path writes to), then the slots (the installed
  // CpuBuffer of each CPU).
  std::atomic<WriterState*>* gates() { return reinterpret_cast<std::atomic<WriterState*>*>(this + 1); }
  std::atomic<CpuBuffer*>* slots() {
    return reinterpret_cast<std::atomic<CpuBuffer*>*>(gates() + nr_cpus_ + kTrapSlots);
  }
  const std::atomic<CpuBuffer*>* slots() const { return const_cast<RingBuffer*>(this)->slots(); }
  CpuBuffer* cpu_buffer(int cpu) const { return slots()[cpu + kTrapSlots].load(std::memory_order_acquire); }

  USRTRACE_NOINLINE USRTRACE_COLD bool write_slow(const void* payload, uint32_t len);
  USRTRACE_NOINLINE USRTRACE_COLD bool write_slow_at(const void* payload, uint32_t len, uint64_t tsc);
  template <uint32_t kLen, bool kGivenTs>
  bool write_impl(const void* payload, uint64_t tsc);
  void seal(int cpu);
  void unseal(int cpu);
  void update_gate(int cpu);
  void update_gates();
  // Whether `cb`'s gate may be open: unsealed, relative time stamps, a TSC
  // clock and no reader waiting for any event.
  bool gate_may_open(const CpuBuffer* cb) const;
  void free_grow_pool();
  void wait_slow_paths();
  void reset_locked(CpuBuffer* cb);
  int resize_cpu_locked(CpuBuffer* cb, uint32_t nr_pages);
  void drain_deferred();
  bool page_ready(CpuBuffer* cb, int percent);
  // Growth's page-switch half (grow.cc). Context: as the slow path.
  bool grow_due(const CpuBuffer* cb, uint64_t next_slot, uint64_t new_seq) const;
  bool grow(int cpu, CpuBuffer* cb, uint64_t new_seq);
  // Opens the gate of `cpu`, installed with `cb`, if it is closed and may be
  // open: what a growth section that failed after closing it left (grow.cc).
  // Context: as the slow path; lock-free.
  void reopen_gate(int cpu, CpuBuffer* cb);
  // Keep growth from touching slots and gates while a holder of the control
  // lock does (grow.cc). Context: control lock held.
  void freeze_growth();
  void thaw_growth();
  void wake_now();

  // Writer-read fields first: one cache line, read-only on the write path.
  std::atomic<uint32_t> record_disabled_{0};
  std::atomic<Mode> mode_{Mode::kOverwrite};
  std::atomic<bool> abs_ts_{false};
  std::atomic<clock::ClockId> clock_{clock::ClockId::kLocal};
  int nr_cpus_ = 0;
  uint32_t max_payload_ = 0;
  uint32_t tag_ = 0;
  std::shared_ptr<BufferStore> store_;  // keeps the store alive as long as the buffer

  alignas(64) std::atomic<uint32_t> slow_active_{0};  // slow paths between entry and exit
  std::atomic<uint32_t> waiters_any_{0};              // readers waiting for any event (gates closed)
  std::atomic<uint32_t> waiters_full_{0};             // readers waiting for a watermark
  std::atomic<uint32_t> wait_percent_{0};
  std::atomic<bool> wake_pending_{false};
  std::atomic<uint32_t> wake_seq_{0};  // futex word
  std::atomic<bool> kicked_{false};    // wake_waiters() was called

  // Reset, resize, swap, gates, clock. Try-lockable, so a snapshot from a
  // signal handler never waits for it (run_deferred).
  base::SignalSafeLock control_;
  std::atomic<bool> deferred_pending_{false};
  DeferredFn deferred_fn_ = nullptr;
  void* deferred_arg_ = nullptr;
  // order: relaxed is enough; written under control_, read for display.
  std::atomic<uint64_t> time_start_{0};
  // Set once by enable_growth() before writers see the buffer; owned.
  std::atomic<GrowPool*> grow_{nullptr};
  // Odd while a control operation on a growing buffer may change slots or
  // gates; growth's sections commit only on the even value they read.
  std::atomic<uint64_t> ctl_gen_{0};

 public:
  // Entries before cpu 0 catch the rseq cpu_id values -1 (unregistered) and
  // -2 (registration failed): their gate is closed, so such a write goes to
  // the slow path, which registers the thread.
  static constexpr int kTrapSlots = 2;
  static constexpr uint32_t kMaxInlinePayload = 256;
};

// Holds a buffer's control lock; on release, runs the work deferred to it
// meanwhile (run_deferred). Context: control plane (it may sleep).
class USRTRACE_SCOPED_CAPABILITY RingBuffer::ControlGuard {
 public:
  explicit ControlGuard(RingBuffer& rb) USRTRACE_ACQUIRE(rb.control_) : rb_(rb) {
    rb_.control_.lock();
    froze_ = rb_.grow_.load(std::memory_order_acquire) != nullptr;
    if (froze_) rb_.freeze_growth();
  }
  ~ControlGuard() USRTRACE_RELEASE() {
    if (froze_) rb_.thaw_growth();
    rb_.control_.unlock();
    rb_.drain_deferred();
  }
  ControlGuard(const ControlGuard&) = delete;
  ControlGuard& operator=(const ControlGuard&) = delete;
  RingBuffer& buffer() const { return rb_; }
  operator const Locked&() const { return held_; }  // NOLINT: a proof, meant to convert

 private:
  RingBuffer& rb_;
  Locked held_;
  bool froze_ = false;  // the buffer grows: growth is kept out meanwhile
};

// ---------------------------------------------------------------------------
// The fast path.

namespace internal {
// Copies `kLen` bytes from (%[src]) to hdr(%%r8) with unaligned 16/8/4-byte
// moves, overlapping the last one; as assembler directives so one template
// serves every length.
// The fast path's assembly, aligned by hand with its comments.
// clang-format off
#define USRTRACE_RB_COPY_ASM                                   \
  ".if %c[len] >= 16\n\t"                                      \
  ".set .Lusrtrace_o, 0\n\t"                                   \
  ".rept %c[len] / 16\n\t"                                     \
  "movups .Lusrtrace_o(%[src]), %%xmm0\n\t"                    \
  "movups %%xmm0, %c[hdr]+.Lusrtrace_o(%%r8)\n\t"              \
  ".set .Lusrtrace_o, .Lusrtrace_o + 16\n\t"                   \
  ".endr\n\t"                                                  \
  ".if %c[len] %% 16\n\t"                                      \
  "movups %c[len]-16(%[src]), %%xmm0\n\t"                      \
  "movups %%xmm0, %c[hdr]+%c[len]-16(%%r8)\n\t"                \
  ".endif\n\t"                                                 \
  ".elseif %c[len] >= 8\n\t"                                   \
  "movq (%[src]), %%xmm0\n\t"                                  \
  "movq %%xmm0, %c[hdr](%%r8)\n\t"                             \
  ".if %c[len] > 8\n\t"                                        \
  "movq %c[len]-8(%[src]), %%xmm0\n\t"                         \
  "movq %%xmm0, %c[hdr]+%c[len]-8(%%r8)\n\t"                   \
  ".endif\n\t"                                                 \
  ".else\n\t"                                                  \
  "movd (%[src]), %%xmm0\n\t"                                  \
  "movd %%xmm0, %c[hdr](%%r8)\n\t"                             \
  ".if %c[len] > 4\n\t"                                        \
  "movd %c[len]-4(%[src]), %%xmm0\n\t"                         \
  "movd %%xmm0, %c[hdr]+%c[len]-4(%%r8)\n\t"                   \
  ".endif\n\t"                                                 \
  ".endif\n\t"
}  // namespace internal

template <uint32_t kLen>
USRTRACE_ALWAYS_INLINE bool RingBuffer::write(const void* payload) {
  return write_impl<kLen, false>(payload, 0);
}

template <uint32_t kLen>
USRTRACE_ALWAYS_INLINE bool RingBuffer::write_at(const void* payload, uint64_t tsc) {
  return write_impl<kLen, true>(payload, tsc);
}

template <uint32_t kLen, bool kGivenTs>
USRTRACE_ALWAYS_INLINE bool RingBuffer::write_impl(const void* payload, uint64_t tsc) {
  if constexpr (kLen < 4 || kLen > kMaxInlinePayload) {
    if constexpr (kGivenTs) return write_slow_at(payload, kLen, tsc);
    return write(payload, kLen);
  } else {
    constexpr EntryLayout L = entry_layout(kLen);
    constexpr uint64_t kInc = (static_cast<uint64_t>(L.size) << 16) | 1;
    static_assert(kInc < (1ull << 31), "lea displacement is a signed 32-bit immediate");
    // record_disabled_ is read with a plain load inside the asm: relaxed is
    // enough, record_off is a soft switch. The rseq offset is an input, so a
    // loop of writes loads it once (base/rseq.h).
    asm goto(
        "cmpl $0, %[disabled]\n\t"
        "jne %l[off]\n\t"
        "6:\n\t"
        "leaq 3f(%%rip), %%rcx\n\t"
        "movq %%rcx, %%fs:8(%[rseqoff])\n\t"  // [A] arm: rseq->rseq_cs = &desc
        "1:\n\t"
        "movslq %%fs:4(%[rseqoff]), %%rcx\n\t"            // cpu_id (-1/-2: trap entries)
        "movq %c[gates](%[rb],%%rcx,8), %%r10\n\t"        // ws = gates[cpu]
        ".if %c[given]\n\t"
        "movq %[tsc], %%rax\n\t"                            // [B] ts given
        ".else\n\t"
        "rdtsc\n\t"                                         // [B]
        "shlq $32, %%rdx\n\t"
        "orq %%rdx, %%rax\n\t"                              // rax = ts
        ".endif\n\t"
        "movq %%rax, %%rdx\n\t"
        "subq 8(%%r10), %%rdx\n\t"                          // rdx = ts - last_ts
        "cmpq $0x7ffffff, %%rdx\n\t"
        "ja %l[slow]\n\t"                                   // needs a time extend (or went back)
        "movq (%%r10), %%r8\n\t"                            // [C] w0
        "leaq %c[inc](%%r8), %%r9\n\t"                      // nw = w0 + (size << 16 | 1)
        "cmpq 16(%%r10), %%r9\n\t"                          // nw < limit: fits, gate open
        "jae %l[slow]\n\t"
        "shrq $16, %%r8\n\t"                                // [D] r8 = where the entry goes
        "shll $5, %%edx\n\t"
        "orl %[tl], %%edx\n\t"
        "movl %%edx, (%%r8)\n\t"                            // header word
        ".if %c[hdr] == 8\n\t"
        "movl %[arr0], 4(%%r8)\n\t"                         // long form: array[0]
        ".endif\n\t"
        ".if %c[len] %% 4\n\t"
        "movl $0, %c[hdr]+%c[pay]-4(%%r8)\n\t"              // tail bytes not left stale
        ".endif\n\t"
        USRTRACE_RB_COPY_ASM
        "movq %%r9, %%xmm0\n\t"                             // [E] commit {nw, ts}
        "pinsrq $1, %%rax, %%xmm0\n\t"
        "movaps %%xmm0, (%%r10)\n\t"
        "2:\n\t"
        USRTRACE_RSEQ_CS_TRAILER("rcx")
        :
        : [rb] "r"(this), [src] "r"(payload), [rseqoff] "r"(base::usrtrace_rseq_offset),
          [disabled] "m"(record_disabled_), [gates] "i"(sizeof(RingBuffer) + kTrapSlots * 8),
          [inc] "i"(kInc), [tl] "i"(L.type_len), [hdr] "i"(L.header), [len] "i"(kLen),
          [pay] "i"(L.payload), [arr0] "i"(L.payload + 4), [given] "i"(kGivenTs ? 1 : 0),
          [tsc] "rm"(tsc)
        : "rax", "rcx", "rdx", "r8", "r9", "r10", "xmm0", "cc", "memory"
        : slow, off);
    // clang-format on
    return true;
  off:
    return false;
  slow:
    if constexpr (kGivenTs) return write_slow_at(payload, kLen, tsc);
    return write_slow(payload, kLen);
  }
}

// reserve / fill / commit on the caller's stack. commit() writes the event in
// one critical section; discard() drops it without it ever reaching the ring
// (the kernel turns a discarded reservation into padding; here there is
// nothing to turn). Context: as write().
template <uint32_t kMax>
class Reservation {
 public:
  Reservation(RingBuffer& rb, uint32_t len) : rb_(rb), len_(len <= kMax ? len : 0), valid_(len <= kMax) {}
  // Where to fill the event; nullptr when `len` exceeded kMax.
  void* data() { return valid_ ? buf_ : nullptr; }
  uint32_t size() const { return len_; }
  bool commit() {
    bool ok = valid_ && rb_.write(buf_, len_);
    valid_ = false;
    return ok;
  }
  void discard() { valid_ = false; }

 private:
  RingBuffer& rb_;
  uint32_t len_;
  bool valid_;
  alignas(8) unsigned char buf_[kMax];
};

class RingBuffer::Iterator {
 public:
  explicit Iterator(RingBuffer& rb);
  // The next event in time order; false at the end of what was there.
  bool next(Event* ev);
  // Events that vanished (overwritten) while iterating.
  uint64_t lost() const { return lost_; }

 private:
  struct Cpu {
    CpuBuffer* cb = nullptr;
    PageCopy copy;
    ReadPos pos;
    bool have = false;  // `ev` holds this CPU's next event
    Event ev;
    uint64_t end_seq = 0;  // the tail when the iterator was made
    uint32_t end_len = 0;
  };
  bool fill(Cpu& c);
  std::vector<Cpu> cpus_;
  uint64_t lost_ = 0;
};

// What ftrace_dump() reads, for a handler of a fatal signal. Unlike
// Iterator it takes no reader_mu (the crashed thread may hold it) and
// allocates nothing: the constructor reserves a page copy per CPU. It starts
// where the consuming reader is, from the position that reader publishes
// for discard mode (reader_index), so it shows what `trace` shows, less the
// entries the consumer holds in its private page copy if the ring has
// overwritten them since (those count as lost).
// Without reader_mu nothing stops a resize from freeing the pages under it:
// the caller keeps control threads out some other way, or accepts it (the
// dump is a dying process's last words).
class RingBuffer::DumpIterator {
 public:
  // Room for `nr_cpus` CPUs whose pages are at most `max_page_size` bytes.
  // Context: control plane; allocates.
  DumpIterator(int nr_cpus, uint32_t max_page_size);
  DumpIterator(const DumpIterator&) = delete;
  DumpIterator& operator=(const DumpIterator&) = delete;

  // Starts over on `rb`, every CPU (cpu < 0) or one. CPUs beyond the
  // prepared count or with larger pages are skipped (skipped() counts them).
  // Context: async-signal-safe; no lock, no allocation.
  void start(RingBuffer& rb, int cpu);
  // As Iterator::next. Context: as start().
  bool next(Event* ev);
  uint64_t lost() const { return lost_; }
  int skipped() const { return skipped_; }

 private:
  struct Cpu {
    CpuBuffer* cb = nullptr;  // null: not iterated
    PageCopy copy;
    ReadPos pos;
    uint64_t first = 0;  // index of the consumer's next entry: older ones are skipped
    bool have = false;
    Event ev;
    uint64_t end_seq = 0;
    uint32_t end_len = 0;
  };
  bool fill(Cpu& c);
  std::unique_ptr<Cpu[]> cpus_;
  int nr_cpus_ = 0;
  int active_ = 0;
  uint32_t max_page_size_ = 0;
  uint64_t lost_ = 0;
  int skipped_ = 0;
};

}  // namespace usrtrace::rb
