// Readers: trace_pipe (consume), trace (Iterator) and trace_pipe_raw
// (read_page). None of them stops or slows writers: pages are copied and the
// copy is checked against the page's meta seq afterwards (ring_buffer.h).
#include <algorithm>
#include <cstring>

#include "ring_buffer/internal.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::rb {

Tail read_tail(const CpuBuffer* cb, const PagesView& v) {
  Tail t = read_tail_raw(cb, v);
  // order: acquire pairs with clear_detached's release store of the floor.
  if (t.seq != 0 && t.seq < cb->floor_seq.load(std::memory_order_acquire)) return Tail{};
  return t;
}

void sync_clear(CpuBuffer* cb) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  // order: acquire pairs with clear_detached's release increment, so the
  // floor stored before it is seen.
  const uint64_t gen = cb->clear_gen.load(std::memory_order_acquire);
  if (cb->reader_gen == gen) return;
  cb->reader_gen = gen;
  cb->pos = ReadPos{};
  cb->pos.index = cb->floor_index.load(std::memory_order_relaxed);
  cb->copy.seq = 0;
  cb->read = 0;
  cb->overrun = 0;
}

Tail read_tail_raw(const CpuBuffer* cb, const PagesView& v) {
  if (v.nr_pages == 0) return Tail{};
  for (;;) {
    // order: acquire; the meta and page reads below must not move before it.
    const uint64_t a = cb->ws.w0.load(std::memory_order_acquire);
    const uint64_t ts = cb->ws.last_ts.load(std::memory_order_acquire);
    // w0 addresses the writers' pages; the view says where they are here.
    const uintptr_t wp = a >> 16;
    const uint64_t slot = static_cast<uint64_t>(wp - v.writer_pages) >> v.page_shift;
    // Not in this page array: cannot happen in the writers' process; a
    // recorder elsewhere may read w0 of a newer geometry (a resize) than
    // its view's, and finds nothing until it takes the view again.
    if (wp < v.writer_pages || slot >= v.nr_pages) return Tail{};
    const PageMeta& m = v.meta[slot];
    const uint64_t seq = m.seq.load(std::memory_order_acquire);
    const uint64_t fi = m.first_index.load(std::memory_order_relaxed);
    // Every commit changes w0, so an unchanged w0 means no commit landed
    // between the loads (the 16-byte commit store is atomic on CPUs with AVX
    // and is checked by rereading both halves).
    if (cb->ws.w0.load(std::memory_order_acquire) != a ||
        cb->ws.last_ts.load(std::memory_order_acquire) != ts)
      continue;
    if (seq == 0) return Tail{};
    Tail t;
    t.seq = seq;
    t.slot = slot;
    t.len = static_cast<uint32_t>(wp - (v.writer_pages + (slot << v.page_shift))) - kPageHeaderSize;
    if (t.len > v.page_size - kPageHeaderSize) return Tail{};  // as above
    t.entries = static_cast<uint32_t>(a & 0xffff);
    t.last_ts = ts;
    t.first_index = fi;
    return t;
  }
}

CopyResult copy_page(const CpuBuffer* cb, const PagesView& v, uint64_t seq, PageCopy* out) {
  const Tail t = read_tail(cb, v);
  if (t.seq == 0 || seq > t.seq) return CopyResult::kNotYet;
  if (seq < oldest_seq(cb, v, t)) return CopyResult::kGone;
  const uint64_t slot = v.slot_of(seq);
  const PageMeta& m = v.meta[slot];
  if (m.seq.load(std::memory_order_acquire) != seq) return CopyResult::kGone;
  const uint8_t* page = v.page_at(slot);
  const bool tail = seq == t.seq;
  uint32_t len, entries;
  if (tail) {
    len = t.len;
    entries = t.entries;
  } else {
    len = static_cast<uint32_t>(
        __atomic_load_n(&reinterpret_cast<const PageHeader*>(page)->commit, __ATOMIC_RELAXED) &
        kCommitLengthMask);
    entries = static_cast<uint32_t>(m.entries.load(std::memory_order_relaxed));
  }
  const uint64_t first_index = m.first_index.load(std::memory_order_relaxed);
  const uint64_t missed = m.missed.load(std::memory_order_relaxed);
  if (len > v.page_size - kPageHeaderSize) return CopyResult::kGone;
  out->page.resize(v.page_size);
  std::memcpy(out->page.data(), page, kPageHeaderSize + len);
  // order: the copy's loads complete before the seq is read again (seqlock).
  std::atomic_thread_fence(std::memory_order_acquire);
  if (m.seq.load(std::memory_order_relaxed) != seq) return CopyResult::kGone;
  out->seq = seq;
  out->len = len;
  out->entries = entries;
  out->first_index = first_index;
  out->missed = missed;
  out->end_ts = tail ? t.last_ts : 0;
  out->is_tail = tail;
  return CopyResult::kOk;
}

namespace {

// One reader's view of one CPU: the consuming reader's state in the
// CpuBuffer, or an iterator's private one.
struct Cursor {
  CpuBuffer* cb;
  PagesView v;
  ReadPos* pos;
  PageCopy* copy;
  uint64_t* lost;  // where lost entries are counted (overrun for the consumer)
  uint64_t* read;  // consumed entries (consumer only)
  bool consuming;
  uint64_t end_seq = ~0ull;  // iterators stop at the tail they saw when created
  uint32_t end_len = ~0u;

  uint32_t limit() const { return copy->seq == end_seq ? std::min(copy->len, end_len) : copy->len; }
};

// Tells writers how far the consumer got. order: release; a discard-mode
// switch that sees the index may reuse the page, and must not do so before
// this reader is done with it.
void publish(const Cursor& c) {
  if (!c.consuming) return;
  c.cb->reader_next_seq.store(c.pos->seq, std::memory_order_release);
  c.cb->reader_index.store(c.pos->index, std::memory_order_release);
}

// The copy now holds page `seq` from its start: position the cursor there
// and count what was lost before it.
void enter_page(Cursor& c, uint64_t seq) {
  ReadPos& p = *c.pos;
  const PageCopy& cp = *c.copy;
  if (cp.first_index > p.index) {
    uint64_t lost = cp.first_index - p.index;
    *c.lost += lost;
    p.pending_missed += lost;
  }
  p.pending_missed += cp.missed;
  p.seq = seq;
  p.off = 0;
  p.ts = reinterpret_cast<const PageHeader*>(cp.page.data())->timestamp;
  p.index = cp.first_index;
  publish(c);
}

// Moves to the oldest page at or after `from` that is still there.
bool jump(Cursor& c, uint64_t from) {
  for (int tries = 0; tries < 64; ++tries) {
    Tail t = read_tail(c.cb, c.v);
    if (t.seq == 0) return false;
    uint64_t target = std::max(from, oldest_seq(c.cb, c.v, t));
    if (target > c.end_seq) return false;
    switch (copy_page(c.cb, c.v, target, c.copy)) {
      case CopyResult::kOk:
        enter_page(c, target);
        return true;
      case CopyResult::kNotYet:
        return false;
      case CopyResult::kGone:
        from = target + 1;  // overwritten while we looked; try the next one
        break;
    }
  }
  return false;
}

// Makes the cursor's copy hold an unread entry at pos.off. False: none now.
bool ensure(Cursor& c) {
  ReadPos& p = *c.pos;
  PageCopy& cp = *c.copy;
  for (int guard = 0; guard < 256; ++guard) {
    if (p.seq > c.end_seq) return false;
    if (p.seq != 0 && cp.seq == p.seq && p.off < c.limit()) return true;
    if (p.seq == 0) {
      if (!jump(c, 1)) return false;
      continue;
    }
    if (cp.seq == p.seq) {  // the copy is read to its end
      if (p.seq == c.end_seq) return false;
      if (!cp.is_tail) {
        uint64_t next = p.seq + 1;
        CopyResult r = copy_page(c.cb, c.v, next, &cp);
        if (r == CopyResult::kOk) {
          enter_page(c, next);
        } else {
          cp.seq = 0;
          if (r == CopyResult::kNotYet || !jump(c, next)) return false;
        }
        continue;
      }
      Tail t = read_tail(c.cb, c.v);
      if (t.seq == p.seq && t.len <= cp.len) return false;  // nothing new yet
    }
    // (Re)copy the page the cursor is in: the tail may have grown, or the
    // copy belongs to another page.
    CopyResult r = copy_page(c.cb, c.v, p.seq, &cp);
    if (r == CopyResult::kOk) continue;
    cp.seq = 0;
    if (r == CopyResult::kNotYet) return false;
    // The rest of the page was overwritten: entries after pos are lost;
    // enter_page counts them from the next page's first index.
    if (!jump(c, p.seq + 1)) return false;
  }
  return false;
}

// Reads the event at the cursor; with `advance`, moves past it.
bool read_event(Cursor& c, Event* ev, bool advance) {
  ReadPos& p = *c.pos;
  PageCopy& cp = *c.copy;
  for (int guard = 0; guard < 256; ++guard) {
    if (!ensure(c)) return false;
    PageWalker w(cp.page.data() + kPageHeaderSize, c.limit(), p.ts, p.off);
    Entry e;
    if (w.next_data(&e)) {
      ev->cpu = c.cb->cpu;
      ev->ts = e.ts;
      ev->data = e.payload;
      ev->len = e.payload_len;
      ev->missed_before = p.pending_missed;
      ev->lost_before = p.pending_missed != 0 || p.lost_unknown;
      if (advance) {
        p.off = w.offset();
        p.ts = e.ts;
        p.index++;
        p.pending_missed = 0;
        p.lost_unknown = false;
        if (c.read) ++*c.read;
        publish(c);
      }
      return true;
    }
    if (w.corrupt()) {  // not from our writers; skip the rest of the page
      p.lost_unknown = true;
      p.off = c.limit();
      continue;
    }
    // Only time extends or padding were left: step past them.
    p.off = w.offset();
    p.ts = w.ts();
  }
  return false;
}

Cursor consumer(CpuBuffer* cb) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  sync_clear(cb);
  return Cursor{cb, own_view(cb), &cb->pos, &cb->copy, &cb->overrun, &cb->read, true};
}

}  // namespace

bool RingBuffer::consume(Event* ev, int cpu) { return consume_copy(ev, cpu, nullptr, 0); }

bool RingBuffer::consume_copy(Event* ev, int cpu, uint8_t* copy,
                              size_t copy_size) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  if (cpu >= nr_cpus_) return false;
  // Under the reader lock: the bytes are still those of the event.
  auto take = [&](bool ok) {
    if (ok && copy) {
      if (ev->len > copy_size) return false;
      std::memcpy(copy, ev->data, ev->len);
      ev->data = copy;
    }
    return ok;
  };
  if (cpu >= 0) {
    CpuBuffer* cb = cpu_buffer(cpu);
    base::MutexLock rl(&cb->reader_mu);
    Cursor c = consumer(cb);
    return take(read_event(c, ev, true));
  }
  // Merge: the earliest head event across CPUs. Locks in CPU order.
  for (int c = 0; c < nr_cpus_; ++c) cpu_buffer(c)->reader_mu.lock();
  int best = -1;
  Event cand;
  for (int c = 0; c < nr_cpus_; ++c) {
    Cursor cur = consumer(cpu_buffer(c));
    Event e;
    if (read_event(cur, &e, false) && (best < 0 || e.ts < cand.ts)) {
      best = c;
      cand = e;
    }
  }
  bool ok = false;
  if (best >= 0) {
    Cursor cur = consumer(cpu_buffer(best));
    ok = take(read_event(cur, ev, true));
  }
  for (int c = nr_cpus_ - 1; c >= 0; --c) cpu_buffer(c)->reader_mu.unlock();
  return ok;
}

bool RingBuffer::peek(Event* ev, int cpu) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  if (cpu >= nr_cpus_) return false;
  if (cpu >= 0) {
    CpuBuffer* cb = cpu_buffer(cpu);
    base::MutexLock rl(&cb->reader_mu);
    Cursor c = consumer(cb);
    return read_event(c, ev, false);
  }
  for (int c = 0; c < nr_cpus_; ++c) cpu_buffer(c)->reader_mu.lock();
  bool found = false;
  for (int c = 0; c < nr_cpus_; ++c) {
    Cursor cur = consumer(cpu_buffer(c));
    Event e;
    if (read_event(cur, &e, false) && (!found || e.ts < ev->ts)) {
      *ev = e;
      found = true;
    }
  }
  for (int c = nr_cpus_ - 1; c >= 0; --c) cpu_buffer(c)->reader_mu.unlock();
  return found;
}

namespace {

// Hands out the rest of the cursor's page as a kernel page (read_page,
// read_page_external). A prefix the reader already consumed becomes one
// discarded entry (type 29, delta 1) under a page time stamp one tick
// earlier, so the page parses and every remaining time stays exact; O(1),
// whatever was consumed.
uint32_t hand_page(Cursor& c, uint8_t* out, bool full_only) {
  if (!ensure(c)) return 0;
  ReadPos& p = *c.pos;
  PageCopy& cp = *c.copy;
  if (cp.is_tail && full_only) {
    // The copy was the tail when it was taken; the writer may have filled
    // the page and gone on since, and ensure() keeps a copy that still has
    // unread entries. Take it again before calling it open.
    // ReadPageTest.FullOnlyRetakesThePageThatWasTheTail.
    cp.seq = 0;
    if (!ensure(c) || cp.is_tail) return 0;
  }
  std::memcpy(out, cp.page.data(), kPageHeaderSize + cp.len);
  // `out` may sit at any alignment (a control-socket message puts each
  // page after its CPU number): the header is stored bytewise.
  if (p.off > 0) {
    uint32_t pad[2] = {encode_header(kTypePadding, 1), p.off - 4};
    std::memcpy(out + kPageHeaderSize, pad, sizeof pad);
    const uint64_t page_ts = p.ts - 1;
    std::memcpy(out + offsetof(PageHeader, timestamp), &page_ts, sizeof page_ts);
  }
  uint64_t commit = cp.len;
  const uint64_t missed = p.pending_missed;
  if (missed != 0 || p.lost_unknown) {
    commit |= kMissedEvents;
    if (missed != 0 && kPageHeaderSize + cp.len + 8 <= c.v.page_size) {
      std::memcpy(out + kPageHeaderSize + cp.len, &missed, 8);
      commit |= kMissedStored;
    }
  }
  std::memcpy(out + offsetof(PageHeader, commit), &commit, sizeof commit);
  const uint64_t handed = cp.first_index + cp.entries - p.index;
  *c.read += handed;
  p.index += handed;
  p.off = cp.len;
  p.ts = cp.is_tail ? cp.end_ts : p.ts;
  p.pending_missed = 0;
  p.lost_unknown = false;
  publish(c);
  return cp.len;
}

}  // namespace

uint32_t RingBuffer::read_page(int cpu, uint8_t* out, size_t out_size, bool full_only) {
  if (cpu < 0 || cpu >= nr_cpus_) return 0;
  CpuBuffer* cb = cpu_buffer(cpu);
  base::MutexLock rl(&cb->reader_mu);
  if (out_size < cb->page_size) return 0;
  Cursor c = consumer(cb);
  return hand_page(c, out, full_only);
}

uint32_t read_page_external(CpuBuffer* cb, const PagesView& v, ExternalConsumer* r, uint8_t* out,
                            size_t out_size, bool full_only) {
  if (out_size < v.page_size || v.nr_pages == 0) return 0;
  // order: acquire pairs with clear_detached's release increment, so the
  // floor stored before it is seen (sync_clear's rule, for this position).
  const uint64_t gen = cb->clear_gen.load(std::memory_order_acquire);
  if (!r->started || r->gen != gen) {
    r->started = true;
    r->gen = gen;
    r->pos = ReadPos{};
    r->pos.index = cb->floor_index.load(std::memory_order_relaxed);
    r->copy.seq = 0;
  }
  Cursor c{cb, v, &r->pos, &r->copy, &r->overrun, &r->read, true};
  return hand_page(c, out, full_only);
}

// ---------------------------------------------------------------------------

RingBuffer::Iterator::Iterator(RingBuffer& rb) : cpus_(static_cast<size_t>(rb.nr_cpus_)) {
  for (int i = 0; i < rb.nr_cpus_; ++i) {
    Cpu& c = cpus_[static_cast<size_t>(i)];
    c.cb = rb.cpu_buffer(i);
    base::MutexLock rl(&c.cb->reader_mu);
    sync_clear(c.cb);
    c.pos = c.cb->pos;
    c.copy = c.cb->copy;
    Tail t = read_tail(c.cb);
    c.end_seq = t.seq;
    c.end_len = t.len;
  }
}

bool RingBuffer::Iterator::fill(Cpu& c) {
  if (c.end_seq == 0) return false;
  // Not for the position (the iterator has its own) but for the pages: a
  // resize frees them under this lock.
  base::MutexLock rl(&c.cb->reader_mu);
  uint64_t unused = 0;
  Cursor cur{c.cb, own_view(c.cb), &c.pos, &c.copy, &lost_, &unused, false, c.end_seq, c.end_len};
  return read_event(cur, &c.ev, true);
}

bool RingBuffer::Iterator::next(Event* ev) {
  Cpu* best = nullptr;
  for (Cpu& c : cpus_) {
    if (!c.have) c.have = fill(c);
    if (c.have && (!best || c.ev.ts < best->ev.ts)) best = &c;
  }
  if (!best) return false;
  *ev = best->ev;
  best->have = false;
  return true;
}

// ---------------------------------------------------------------------------

RingBuffer::DumpIterator::DumpIterator(int nr_cpus, uint32_t max_page_size)
    : cpus_(new Cpu[static_cast<size_t>(nr_cpus)]), nr_cpus_(nr_cpus), max_page_size_(max_page_size) {
  // Sized once: copy_page's resize() to a page size up to this one then
  // never allocates.
  for (int i = 0; i < nr_cpus; ++i) cpus_[static_cast<size_t>(i)].copy.page.resize(max_page_size);
}

void RingBuffer::DumpIterator::start(RingBuffer& rb, int cpu) {
  lost_ = 0;
  skipped_ = 0;
  active_ = std::min(rb.nr_cpus_, nr_cpus_);
  skipped_ = rb.nr_cpus_ - active_;
  for (int i = 0; i < active_; ++i) {
    Cpu& c = cpus_[static_cast<size_t>(i)];
    c.cb = nullptr;
    c.have = false;
    if (cpu >= 0 && i != cpu) continue;
    CpuBuffer* cb = rb.cpu_buffer(i);
    if (!cb || cb->page_size > max_page_size_) {
      ++skipped_;
      continue;
    }
    c.cb = cb;
    c.copy.seq = 0;
    c.pos = ReadPos{};
    // order: acquire pairs with the consumer's release publish(); entries
    // below it were consumed (trace_pipe) and `trace` no longer shows them.
    c.first = cb->reader_index.load(std::memory_order_acquire);
    c.pos.index = c.first;  // a first page starting above it: the gap was lost
    const Tail t = read_tail(cb);
    c.end_seq = t.seq;
    c.end_len = t.len;
  }
}

bool RingBuffer::DumpIterator::fill(Cpu& c) {
  if (!c.cb || c.end_seq == 0) return false;
  uint64_t unused = 0;
  Cursor cur{c.cb, own_view(c.cb), &c.pos, &c.copy, &lost_, &unused, false, c.end_seq, c.end_len};
  for (;;) {
    if (!read_event(cur, &c.ev, true)) return false;
    if (c.pos.index > c.first) return true;  // pos.index is now one past the event's
  }
}

bool RingBuffer::DumpIterator::next(Event* ev) {
  Cpu* best = nullptr;
  for (int i = 0; i < active_; ++i) {
    Cpu& c = cpus_[static_cast<size_t>(i)];
    if (!c.have) c.have = fill(c);
    if (c.have && (!best || c.ev.ts < best->ev.ts)) best = &c;
  }
  if (!best) return false;
  *ev = best->ev;
  best->have = false;
  return true;
}

}  // namespace usrtrace::rb
