// The write path's slow half: page switches, time extends, absolute time
// stamps, clocks other than the TSC, discard-mode drops and wake-ups.
//
// Everything here ends in rseq_commit(): one generic critical section that
// re-checks the snapshot the C++ code computed from, performs the stores the
// C++ code listed, copies the payload and commits {w0, last_ts}. See the
// design block in ring_buffer.h for why that is enough.
#include <cstring>

#include "base/sys.h"
#include "ring_buffer/internal.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::rb {
namespace {

constexpr int kMaxStores = 4;

struct Store {
  void* addr;
  uint64_t val;
};

// ABI with rseq_commit's assembly; offsets asserted below.
struct CommitOp {
  int64_t cpu;               // 0: the CPU the snapshot was taken on
  CpuBuffer* cb;             // 8: must still be installed for that CPU
  uint64_t expect_w0;        // 16
  uint64_t expect_ts;        // 24
  uint64_t new_w0;           // 32
  uint64_t new_ts;           // 40
  uint8_t* copy_dst;         // 48
  const void* copy_src;      // 56
  uint64_t copy_len;         // 64
  uint64_t nstores;          // 72
  Store stores[kMaxStores];  // 80

  void store(void* addr, uint64_t val) {
    USRTRACE_CHECK(nstores < kMaxStores);
    stores[nstores++] = {addr, val};
  }
};
static_assert(offsetof(CommitOp, cb) == 8 && offsetof(CommitOp, expect_w0) == 16 &&
              offsetof(CommitOp, new_w0) == 32 && offsetof(CommitOp, copy_dst) == 48 &&
              offsetof(CommitOp, nstores) == 72 && offsetof(CommitOp, stores) == 80 && sizeof(Store) == 16);

// The start of rseq_commit's and rseq_switch's sections: arm, then check
// that the op's snapshot still holds on this CPU (op fields 0..24: cpu, cb,
// expect_w0, expect_ts); label 5 is the failure exit. Leaves the CpuBuffer
// in %rdx. Needs operands [op], [slots], [rseqoff] and [sealed].
#define USRTRACE_RB_SECTION_CHECKS     \
  USRTRACE_RSEQ_CS_BEGIN("rax")        \
  "cmpq %%rax, 0(%[op])\n\t"           \
  "jne 5f\n\t"                         \
  "movq (%[slots],%%rax,8), %%rdx\n\t" \
  "cmpq %%rdx, 8(%[op])\n\t"           \
  "jne 5f\n\t"                         \
  "cmpl $0, %c[sealed](%%rdx)\n\t"     \
  "jne 5f\n\t"                         \
  "movq (%%rdx), %%rax\n\t"            \
  "cmpq %%rax, 16(%[op])\n\t"          \
  "jne 5f\n\t"                         \
  "movq 8(%%rdx), %%rax\n\t"           \
  "cmpq %%rax, 24(%[op])\n\t"          \
  "jne 5f\n\t"

// Runs the critical section for `op` on the current CPU. Returns false when
// the CPU, the installed CpuBuffer, `sealed` or {w0, last_ts} differ from the
// snapshot; the caller takes a new snapshot and tries again. An abort
// (preemption, migration, signal) restarts the section from its start.
// Context: any thread; async-signal-safe; no lock, no allocation.
USRTRACE_NOINLINE bool rseq_commit(std::atomic<CpuBuffer*>* cpu0_slot, const CommitOp* op) {
  int ok;
  asm volatile(USRTRACE_RB_SECTION_CHECKS
               "movq 72(%[op]), %%rcx\n\t"
               "leaq 80(%[op]), %%rsi\n\t"
               "testq %%rcx, %%rcx\n\t"
               "jz 8f\n\t"
               "7:\n\t"
               "movq (%%rsi), %%rdi\n\t"
               "movq 8(%%rsi), %%rax\n\t"
               "movq %%rax, (%%rdi)\n\t"
               "addq $16, %%rsi\n\t"
               "decq %%rcx\n\t"
               "jnz 7b\n\t"
               "8:\n\t"
               "movq 48(%[op]), %%rdi\n\t"
               "movq 56(%[op]), %%rsi\n\t"
               "movq 64(%[op]), %%rcx\n\t"
               "rep movsb\n\t"
               "movq 32(%[op]), %%xmm0\n\t"
               "pinsrq $1, 40(%[op]), %%xmm0\n\t"
               "movaps %%xmm0, (%%rdx)\n\t"  // commit
               "2:\n\t"
               "movl $1, %[ok]\n\t"
               "jmp 9f\n\t"
               "5:\n\t"
               "movl $0, %[ok]\n\t"
               "9:\n\t" USRTRACE_RSEQ_CS_TRAILER("rcx")
               : [ok] "=&r"(ok)
               : [op] "r"(op), [slots] "r"(cpu0_slot), [rseqoff] "r"(base::usrtrace_rseq_offset),
                 [sealed] "i"(kWsSealed)
               : "rax", "rcx", "rdx", "rsi", "rdi", "xmm0", "cc", "memory");
  return ok != 0;
}

// ABI with rseq_switch's assembly; offsets asserted below.
struct SwitchOp {
  int64_t cpu;            // 0: the CPU the snapshot was taken on
  CpuBuffer* cb;          // 8: must still be installed for that CPU
  uint64_t expect_w0;     // 16
  uint64_t expect_ts;     // 24
  uint64_t new_w0;        // 32
  uint64_t new_ts;        // 40: also the new page's time stamp
  PageMeta* next_meta;    // 48: the page being opened
  uint64_t new_seq;       // 56
  uint64_t first_index;   // 64
  uint64_t missed;        // 72
  PageMeta* tail_meta;    // 80: the page being closed; nullptr if none
  uint64_t tail_entries;  // 88
  uint64_t* tail_commit;  // 96
  uint64_t tail_len;      // 104
  uint8_t* new_page;      // 112
  uint64_t dropped_seen;  // 120
  uint64_t head[2];       // 128: the first 16 data bytes (stamp, header word)
  uint8_t* zero_at;       // 144: 8 zero bytes covering the payload's padding
  uint8_t* copy_dst;      // 152
  const void* copy_src;   // 160
  uint64_t copy_len;      // 168
};
static_assert(offsetof(SwitchOp, new_w0) == 32 && offsetof(SwitchOp, next_meta) == 48 &&
              offsetof(SwitchOp, tail_meta) == 80 && offsetof(SwitchOp, new_page) == 112 &&
              offsetof(SwitchOp, head) == 128 && offsetof(SwitchOp, zero_at) == 144 &&
              offsetof(SwitchOp, copy_len) == 168);
static_assert(offsetof(PageMeta, seq) == 0 && offsetof(PageMeta, first_index) == 8 &&
              offsetof(PageMeta, missed) == 16 && offsetof(PageMeta, entries) == 24);
static_assert(offsetof(PageHeader, timestamp) == 0 && offsetof(PageHeader, commit) == 8 &&
              kPageHeaderSize == 16);

// The page switch as one critical section: the generic rseq_commit with its
// stores laid out in advance, because it runs once per page (every ~127
// events of 28 bytes) and so weighs on the cost of every event. Checks as
// rseq_commit does, then stores in the order of the invariants in
// ring_buffer.h: the next page's meta (seq first), the closed page's entries
// and commit length, the new page's header, the writer's dropped_seen, a
// limit of 0, the event, and last the 16-byte commit. rseq_fix_limit then
// opens the new page to the fast path.
// Context: any thread; async-signal-safe; no lock, no allocation.
USRTRACE_NOINLINE bool rseq_switch(std::atomic<CpuBuffer*>* cpu0_slot, const SwitchOp* op) {
  int ok;
  asm volatile(USRTRACE_RB_SECTION_CHECKS
               "movq 48(%[op]), %%rsi\n\t"  // next page's meta: seq first (invariant 1)
               "movq 56(%[op]), %%rax\n\t"
               "movq %%rax, 0(%%rsi)\n\t"
               "movq 64(%[op]), %%rax\n\t"
               "movq %%rax, 8(%%rsi)\n\t"
               "movq 72(%[op]), %%rax\n\t"
               "movq %%rax, 16(%%rsi)\n\t"
               "movq $0, 24(%%rsi)\n\t"
               "movq 80(%[op]), %%rsi\n\t"  // close the tail page, if there is one
               "testq %%rsi, %%rsi\n\t"
               "jz 7f\n\t"
               "movq 88(%[op]), %%rax\n\t"
               "movq %%rax, 24(%%rsi)\n\t"
               "movq 96(%[op]), %%rsi\n\t"
               "movq 104(%[op]), %%rax\n\t"
               "movq %%rax, (%%rsi)\n\t"
               "7:\n\t"
               "movq 112(%[op]), %%rdi\n\t"  // the new page's header
               "movq 40(%[op]), %%rax\n\t"
               "movq %%rax, 0(%%rdi)\n\t"
               "movq $0, 8(%%rdi)\n\t"
               "movq 120(%[op]), %%rax\n\t"
               "movq %%rax, %c[dropped_seen](%%rdx)\n\t"
               "movq $0, %c[limit](%%rdx)\n\t"  // the limit invariant (ring_buffer.h)
               "movq 144(%[op]), %%rax\n\t"     // the event
               "movq $0, (%%rax)\n\t"
               "movq 128(%[op]), %%rax\n\t"
               "movq %%rax, 16(%%rdi)\n\t"
               "movq 136(%[op]), %%rax\n\t"
               "movq %%rax, 24(%%rdi)\n\t"
               "movq 152(%[op]), %%rdi\n\t"
               "movq 160(%[op]), %%rsi\n\t"
               "movq 168(%[op]), %%rcx\n\t"
               "shrq $3, %%rcx\n\t"
               "rep movsq\n\t"
               "movq 168(%[op]), %%rcx\n\t"
               "andq $7, %%rcx\n\t"
               "rep movsb\n\t"
               "movq 32(%[op]), %%xmm0\n\t"
               "pinsrq $1, 40(%[op]), %%xmm0\n\t"
               "movaps %%xmm0, (%%rdx)\n\t"  // commit
               "2:\n\t"
               "movl $1, %[ok]\n\t"
               "jmp 9f\n\t"
               "5:\n\t"
               "movl $0, %[ok]\n\t"
               "9:\n\t" USRTRACE_RSEQ_CS_TRAILER("rcx")
               : [ok] "=&r"(ok)
               : [op] "r"(op), [slots] "r"(cpu0_slot), [rseqoff] "r"(base::usrtrace_rseq_offset),
                 [sealed] "i"(kWsSealed), [dropped_seen] "i"(kWsDroppedSeen), [limit] "i"(kWsLimit)
               : "rax", "rcx", "rdx", "rsi", "rdi", "xmm0", "cc", "memory");
  return ok != 0;
}

// Opens the tail page of `cpu` to the fast path after a switch: limit = the
// end of the page w0 points into, in w0's units. The store is the section's
// last instruction and w0 is read inside it, so limit only ever names w0's
// page (or is 0). If the thread migrated since the switch, nothing is done:
// the next write on that CPU takes the slow path, whose rseq_commit sets the
// limit as well. Context: any thread; async-signal-safe.
USRTRACE_NOINLINE void rseq_fix_limit(std::atomic<CpuBuffer*>* cpu0_slot, int64_t cpu, CpuBuffer* cb) {
  const uint64_t page_size = cb->page_size;
  asm volatile(
      USRTRACE_RSEQ_CS_BEGIN("rax")
      "cmpq %%rax, %[cpu]\n\t"
      "jne 2f\n\t"
      "cmpq %[cb], (%[slots],%%rax,8)\n\t"
      "jne 2f\n\t"
      "cmpl $0, %c[sealed](%[cb])\n\t"
      "jne 2f\n\t"
      "movq (%[cb]), %%rax\n\t"  // w0
      "shrq $16, %%rax\n\t"
      "andq %[mask], %%rax\n\t"  // its page
      "addq %[size], %%rax\n\t"  // the page's end
      "shlq $16, %%rax\n\t"
      "movq %%rax, %c[limit](%[cb])\n\t"
      "2:\n\t" USRTRACE_RSEQ_CS_TRAILER("rax")
      :
      : [cpu] "r"(cpu), [cb] "r"(cb), [slots] "r"(cpu0_slot), [mask] "r"(~(page_size - 1)),
        [size] "r"(page_size), [rseqoff] "r"(base::usrtrace_rseq_offset), [sealed] "i"(kWsSealed),
        [limit] "i"(kWsLimit)
      : "rax", "cc", "memory");
}

uint64_t pack_w0(const uint8_t* p, uint32_t entries) {
  return (reinterpret_cast<uint64_t>(p) << 16) | entries;
}

uint64_t two_words(uint32_t lo, uint32_t hi) { return lo | (static_cast<uint64_t>(hi) << 32); }

// Adds the stores and the copy that put one data entry at `at`.
void emit_event(CommitOp* op, uint8_t* at, const EntryLayout& L, uint32_t delta, const void* payload,
                uint32_t len) {
  if (len != L.payload) op->store(at + L.size - 8, 0);  // no stale tail bytes
  uint32_t hi = L.type_len == 0 ? L.payload + 4 : 0;    // long form: array[0]
  op->store(at, two_words(encode_header(L.type_len, delta), hi));
  op->copy_dst = at + L.header;
  op->copy_src = payload;
  op->copy_len = len;
}

uint64_t time_extend(uint64_t delta) {
  return two_words(encode_header(kTypeTimeExtend, static_cast<uint32_t>(delta & kTsDeltaMax)),
                   static_cast<uint32_t>(delta >> kTsShift));
}

uint64_t time_stamp(uint64_t ts) {
  return two_words(encode_header(kTypeTimeStamp, static_cast<uint32_t>(ts & kTsDeltaMax)),
                   static_cast<uint32_t>(ts >> kTsShift));
}

}  // namespace

struct SlowPath {
  // Context: any thread; async-signal-safe; no lock, no allocation. The
  // system calls it can make: rseq registration once per thread that glibc
  // did not register, and one futex wake when a reader is blocked waiting.
  // A growing buffer's switch grows it without a lock (grow.cc).
  // `given`: the caller's TSC stamp (write_at), used when the clock is a
  // TSC clock; nullptr: read the clock here.
  static bool write(RingBuffer* rb, const void* payload, uint32_t len, const uint64_t* given = nullptr) {
    // order: relaxed is enough; record_off is a soft switch.
    if (rb->record_disabled_.load(std::memory_order_relaxed) != 0) return false;
    if (len > rb->max_payload_) return false;
    const EntryLayout L = entry_layout(len);

    // Counted so that control never frees what this code reads (see
    // wait_slow_paths). order: seq_cst pairs with seal()'s seq_cst store.
    rb->slow_active_.fetch_add(1, std::memory_order_seq_cst);
    struct Exit {
      RingBuffer* rb;
      ~Exit() { rb->slow_active_.fetch_sub(1, std::memory_order_release); }
    } exit{rb};

    for (;;) {
      int cpu = base::rseq_cpu_id();
      if (USRTRACE_UNLIKELY(cpu < 0 || cpu >= rb->nr_cpus_)) {
        if (!base::rseq_register_current_thread()) return false;
        continue;
      }
      CpuBuffer* cb = rb->cpu_buffer(cpu);
      if (cb->ws.sealed.load(std::memory_order_acquire) != 0) return false;
      // A growth section that failed after closing the gate left it closed
      // (grow.cc): reopen it rather than come here for every write.
      if (USRTRACE_UNLIKELY(rb->grow_.load(std::memory_order_relaxed) != nullptr) &&
          rb->gates()[cpu + RingBuffer::kTrapSlots].load(std::memory_order_relaxed) == &g_closed)
        rb->reopen_gate(cpu, cb);
      // The pair need not be consistent: the section compares both.
      // order: acquire on w0 orders the meta/page reads below after it.
      const uint64_t w0 = cb->ws.w0.load(std::memory_order_acquire);
      const uint64_t last = cb->ws.last_ts.load(std::memory_order_relaxed);
      const clock::ClockId clk = rb->clock_.load(std::memory_order_relaxed);
      uint64_t ts = !clock::is_tsc(clk) ? clock::read_raw(clk) : given ? *given : clock::rdtsc();
      // A clock read before another thread's later commit (non-TSC clocks
      // are read outside the section): keep time monotonic per CPU.
      if (ts < last) ts = last;

      uint8_t* wp = reinterpret_cast<uint8_t*>(w0 >> 16);
      const uint32_t cnt = static_cast<uint32_t>(w0 & 0xffff);
      if (wp < cb->pages || wp >= cb->pages + (uint64_t{cb->nr_pages} << cb->page_shift))
        continue;  // torn snapshot across a resize; the section would fail anyway
      const uint64_t slot = static_cast<uint64_t>(wp - cb->pages) >> cb->page_shift;
      uint8_t* page = cb->page_at(slot);
      PageMeta& tm = cb->meta[slot];
      const uint64_t tail_seq = tm.seq.load(std::memory_order_acquire);
      const uint32_t off = static_cast<uint32_t>(wp - page);
      const bool abs = rb->abs_ts_.load(std::memory_order_relaxed);

      // A tail below the floor was cleared (clear_detached): open a page.
      if (tail_seq != 0 && tail_seq >= cb->floor_seq.load(std::memory_order_relaxed)) {
        const uint32_t ext = (abs || ts - last > kTsDeltaMax) ? 8 : 0;
        // Strictly inside: w0 never points at a page's end (it would name
        // the next page in memory).
        if (off + ext + L.size < cb->page_size) {
          CommitOp op;  // not zeroed: every field used is set
          op.nstores = 0;
          op.cpu = cpu;
          op.cb = cb;
          op.expect_w0 = w0;
          op.expect_ts = last;
          op.new_ts = ts;
          uint8_t* at = wp;
          uint32_t delta = static_cast<uint32_t>(ts - last);
          if (ext) {
            op.store(at, abs ? time_stamp(ts) : time_extend(ts - last));
            at += 8;
            delta = 0;
          }
          emit_event(&op, at, L, delta, payload, len);
          // w0 stays in this page, so the limit names its page before and
          // after the commit (it may be 0 after a switch whose thread
          // migrated before rseq_fix_limit).
          op.store(&cb->ws.limit, reinterpret_cast<uint64_t>(page + cb->page_size) << 16);
          op.new_w0 = pack_w0(at + L.size, cnt + 1);
          if (!rseq_commit(rb->slots() + RingBuffer::kTrapSlots, &op)) continue;
          after_commit(rb, cb, false);
          return true;
        }
      }

      // Page switch: close the tail page (if any) and open the next slot.
      // Never the tail's own slot, even for the first page (init_state).
      const uint64_t next_slot = slot + 1 == cb->nr_pages ? 0 : slot + 1;
      const uint64_t new_seq = tail_seq + 1;
      PageMeta& nm = cb->meta[next_slot];
      // A growing buffer takes a fresh CpuBuffer before it would overwrite
      // (or drop) what its consumer has not taken (grow.cc); a buffer that
      // does not grow pays this one predictable branch per page switch.
      if (USRTRACE_UNLIKELY(rb->grow_.load(std::memory_order_relaxed) != nullptr) &&
          rb->grow_due(cb, next_slot, new_seq) && rb->grow(cpu, cb, new_seq))
        continue;  // switch into the new CpuBuffer
      if (rb->mode_.load(std::memory_order_relaxed) == Mode::kDiscard) {
        const uint64_t old_seq = nm.seq.load(std::memory_order_acquire);
        if (old_seq != 0 && old_seq != new_seq &&  // new_seq: an aborted switch marked it; content is gone
            nm.first_index.load(std::memory_order_relaxed) + nm.entries.load(std::memory_order_relaxed) >
                cb->reader_index.load(std::memory_order_acquire)) {
          // order: relaxed is enough; the count is read by stats and by the
          // next switch on this CPU, which only needs an eventual value.
          cb->dropped.fetch_add(1, std::memory_order_relaxed);
          return false;
        }
      }
      const uint64_t dropped_now = cb->dropped.load(std::memory_order_relaxed);
      uint8_t* np = cb->page_at(next_slot);
      SwitchOp sw;
      sw.cpu = cpu;
      sw.cb = cb;
      sw.expect_w0 = w0;
      sw.expect_ts = last;
      sw.new_ts = ts;
      sw.next_meta = &nm;
      sw.new_seq = new_seq;
      sw.missed = dropped_now - cb->ws.dropped_seen.load(std::memory_order_relaxed);
      if (tail_seq != 0) {
        sw.first_index = tm.first_index.load(std::memory_order_relaxed) + cnt;
        sw.tail_meta = &tm;
        sw.tail_entries = cnt;
        sw.tail_commit = &reinterpret_cast<PageHeader*>(page)->commit;
        sw.tail_len = off - kPageHeaderSize;
      } else {
        sw.first_index = 0;
        sw.tail_meta = nullptr;
      }
      sw.new_page = np;
      sw.dropped_seen = dropped_now;
      // The data area starts with [time stamp] header [array0] payload.
      const uint32_t stamp = abs ? 8 : 0;
      const uint32_t hi = L.type_len == 0 ? L.payload + 4 : 0;  // long form: array[0]
      const uint64_t header = two_words(encode_header(L.type_len, 0), hi);
      if (abs) {
        sw.head[0] = time_stamp(ts);
        sw.head[1] = header;
      } else {
        sw.head[0] = header;
        sw.head[1] = 0;  // overwritten by the payload, or past the entry
      }
      uint8_t* at = np + kPageHeaderSize + stamp;
      sw.zero_at = at + L.size - 8;
      sw.copy_dst = at + L.header;
      sw.copy_src = payload;
      sw.copy_len = len;
      sw.new_w0 = pack_w0(at + L.size, 1);
      if (!rseq_switch(rb->slots() + RingBuffer::kTrapSlots, &sw)) continue;
      rseq_fix_limit(rb->slots() + RingBuffer::kTrapSlots, cpu, cb);
      after_commit(rb, cb, true);
      return true;
    }
  }

  // Wakes a blocked reader when its condition may now hold. The loads come
  // after the commit store; a reader registers, then fences with membarrier
  // (rseq_fence), then checks for data, so one of the two sees the other.
  static void after_commit(RingBuffer* rb, CpuBuffer* cb, bool switched) {
    // order: relaxed loads are enough, see above.
    if (USRTRACE_LIKELY(rb->waiters_any_.load(std::memory_order_relaxed) == 0 &&
                        rb->waiters_full_.load(std::memory_order_relaxed) == 0))
      return;
    bool wake = rb->waiters_any_.load(std::memory_order_relaxed) != 0;
    if (!wake && switched) {
      uint64_t percent = rb->wait_percent_.load(std::memory_order_relaxed);
      uint64_t tail = cb->meta[cb->slot_of_w0()].seq.load(std::memory_order_relaxed);
      uint64_t next = cb->reader_next_seq.load(std::memory_order_relaxed);
      uint64_t dirty = tail > next ? tail - next : 0;
      wake = (dirty + 1) * 100 >= percent * cb->nr_pages;
    }
    if (wake && rb->wake_pending_.exchange(false, std::memory_order_acq_rel)) rb->wake_now();
  }
};

bool RingBuffer::write_slow(const void* payload, uint32_t len) { return SlowPath::write(this, payload, len); }

bool RingBuffer::write_slow_at(const void* payload, uint32_t len, uint64_t tsc) {
  return SlowPath::write(this, payload, len, &tsc);
}

bool RingBuffer::write_at(const void* payload, uint32_t len, uint64_t tsc) {
  return SlowPath::write(this, payload, len, &tsc);
}

bool RingBuffer::write(const void* payload, uint32_t len) { return SlowPath::write(this, payload, len); }

void RingBuffer::wake_now() {
  // order: release pairs with the waiter's acquire load of the word.
  wake_seq_.fetch_add(1, std::memory_order_release);
  base::futex_wake_all(&wake_seq_);
}

}  // namespace usrtrace::rb
