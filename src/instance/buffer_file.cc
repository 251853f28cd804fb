// buffer_file and USRTRACE_BUFFER_DIR: an instance's buffer in a file that
// survives the process (persist/file_store.h, docs/design/persistent-buffers.md).
//
// Switching replaces the instance's RingBuffer as instance removal does:
// publish the new one in the slot, wait for a grace period
// (synchronize_writers), and only then let the old one go. The file also
// gets what a recovery needs beyond the pages: every event format (kept
// current through the registry's change hook, for shared objects loaded
// later) and a mirror of saved_cmdlines.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "base/files.h"
#include "events/registry.h"
#include "instance/instance.h"
#include "persist/file_store.h"
#include "writers/writers.h"

namespace usrtrace::instance {
namespace {

static_assert(sizeof(writers::MirrorSlot) == sizeof(persist::CmdlineSlot));
static_assert(writers::kSavedCmdlines == 1024);

base::Mutex g_switch_mu;  // switches, and the formats of every file
// Never destroyed: events unregister from static destructors at exit, and
// the registry's change hook then still runs.
struct Files {
  // Stores of instances' live buffers, kept current with the formats.
  std::vector<std::weak_ptr<persist::FileStore>> active;
  // Every format seen, by id: an event whose object was unloaded may still
  // have records in a buffer.
  std::map<uint16_t, std::pair<std::string, std::string>> formats;
};
Files& files() USRTRACE_REQUIRES(g_switch_mu) {
  static Files* f = new Files;
  return *f;
}

void put_record(std::string* out, uint32_t kind, const std::string& body) {
  const uint32_t len = static_cast<uint32_t>(body.size());
  out->append(reinterpret_cast<const char*>(&kind), 4);
  out->append(reinterpret_cast<const char*>(&len), 4);
  out->append(body);
  out->append((8 - body.size() % 8) % 8, '\0');
}

std::string formats_blob(uint32_t page_size) USRTRACE_REQUIRES(g_switch_mu) {
  auto& formats = files().formats;
  events::Registry::get().for_each([&formats](events::EventDesc& ev) {
    formats[ev.id] = {ev.system, events::format_text(ev)};
  });
  std::string blob;
  put_record(&blob, persist::kRecHeaderPage, rb::header_page_text(page_size));
  put_record(&blob, persist::kRecHeaderEvent, rb::header_event_text());
  for (const auto& [id, f] : formats) {
    std::string body(4, '\0');
    const uint16_t slen = static_cast<uint16_t>(std::min<size_t>(f.first.size(), 65535));
    std::memcpy(body.data(), &id, 2);
    std::memcpy(body.data() + 2, &slen, 2);
    body.append(f.first, 0, slen).append(f.second);
    put_record(&blob, persist::kRecEvent, body);
  }
  return blob;
}

// Registry change hook: rewrite the formats of every live file.
void formats_changed() {
  base::MutexLock l(&g_switch_mu);
  std::vector<std::shared_ptr<persist::FileStore>> live;
  auto& active = files().active;
  for (auto it = active.begin(); it != active.end();) {
    if (auto s = it->lock()) {
      live.push_back(std::move(s));
      ++it;
    } else {
      it = active.erase(it);
    }
  }
  if (live.empty()) return;
  for (auto& s : live) s->write_formats(formats_blob(s->page_size()));
}

void detach(persist::FileStore* fs) {
  writers::remove_cmdline_mirror(reinterpret_cast<writers::MirrorSlot*>(fs->cmdlines()));
}

// A buffer in shared memory that `usrtrace record` reads grows rather than
// overwrite what the recorder has not taken (rb::RingBuffer::enable_growth):
// USRTRACE_SHARED_GROW=BYTES, which record sets (--buffer-cap), is the most
// its spares may hold, per instance. Spares of 64 MiB (four of the rings
// record gives), or an eighth of a smaller cap (64 KiB at least), or larger
// when that would make more than the store's table holds: untouched, a
// spare costs one page of the memfd, and two regions made at the start
// (a 6 GiB cap: 96 spares, about 10 ms of system calls).
struct GrowPlan {
  uint32_t spares = 0;
  uint32_t pages_each = 0;
};
GrowPlan grow_plan(uint32_t page_size, std::string* bad) {
  const char* v = base::env("USRTRACE_SHARED_GROW");
  if (!v || !*v) return {};
  char* end = nullptr;
  errno = 0;
  const unsigned long long cap = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || *v == '-') {
    *bad = std::string("USRTRACE_SHARED_GROW=") + v + ": not a number of bytes";
    return {};
  }
  constexpr uint64_t kSpareBytes = uint64_t{64} << 20;
  constexpr uint64_t kMax = persist::FileStore::kMaxExtraCpuBuffers;
  uint64_t each = std::min<uint64_t>(kSpareBytes, std::max<uint64_t>(cap / 8, uint64_t{64} << 10));
  each = std::max<uint64_t>(each, (cap + kMax - 1) / kMax);
  each = (each + page_size - 1) / page_size * page_size;
  GrowPlan p;
  p.spares = static_cast<uint32_t>(std::min<uint64_t>(cap / each, kMax));
  p.pages_each = static_cast<uint32_t>(std::min<uint64_t>(each / page_size, uint64_t{1} << 24));
  return p;
}

}  // namespace

int Instance::set_buffer_file(const std::string& path, int max_refs, std::string* why) {
  base::MutexLock sl(&g_switch_mu);
  // The file it already is: nothing to do. Making a second store of the
  // same file would be refused (FileStore::create: one owner), and the
  // write means "keep this file", not "start it over".
  {
    base::MutexLock l(&mu_);
    if (path == buffer_file_) return 0;
  }
  rb::RingBuffer* old = rb_.load(std::memory_order_acquire);
  rb::Options o;
  o.page_size = old->page_size(0);
  o.size_per_cpu = old->size_bytes(0);
  o.mode = old->mode();
  o.clock = old->clock();
  o.tag = old->tag();
  std::shared_ptr<persist::FileStore> fs;
  int err = 0;
  GrowPlan grow;
  if (path == persist::kSharedMemory) {
    std::string bad;
    grow = grow_plan(o.page_size, &bad);
    if (!bad.empty()) log_error("buffer_file", bad, "USRTRACE_SHARED_BUFFERS=1", 0);
  }
  if (!path.empty()) {
    std::string reason;
    fs = persist::FileStore::create(path, o.page_size, old->nr_cpus(), name_, &err, &reason, grow.spares);
    if (!fs) {
      if (why) *why = "cannot create " + reason;
      return -err;
    }
    if (int rc = fs->write_formats(formats_blob(o.page_size)); rc < 0) {
      if (why) *why = std::string("cannot write ") + path + ": " + std::strerror(-rc);
      return rc;
    }
    writers::add_cmdline_mirror(reinterpret_cast<writers::MirrorSlot*>(fs->cmdlines()));
    fs->set_close_hook(detach);
    o.store = fs;
  }
  auto fresh = rb::RingBuffer::create(o, &err);
  if (!fresh) {
    if (why) {
      *why = "cannot allocate the buffer";
      if (fs && fs->last_error()) *why += std::string(" in ") + path + ": " + std::strerror(fs->last_error());
    }
    return -(err ? err : ENOMEM);
  }
  if (grow.spares > 0) {
    if (int rc = fresh->enable_growth(grow.spares, grow.pages_each); rc < 0)
      log_error("buffer_file", std::string("the buffer will not grow: ") + std::strerror(-rc),
                "USRTRACE_SHARED_GROW", 0);
  }
  fresh->set_time_stamp_abs(old->time_stamp_abs());
  if (!old->record_is_on()) fresh->record_off();
  rb::RingBuffer* nrb = fresh.get();
  rb_.store(nrb, std::memory_order_release);
  // Writers find the buffer through the slot; one published there is in
  // use until a grace period has passed.
  SlotState& ss = g_slot_state[slot_];
  if (ss.buffer.load(std::memory_order_acquire) == old) {
    ss.buffer.store(nrb, std::memory_order_release);
    writers::synchronize_writers();
  }
  if (fs) {
    files().active.push_back(fs);
    events::Registry::get().set_change_hook(formats_changed);
  }
  // The snapshots follow the buffer: new spares in the new store, the same
  // ring size. The old ones (and what they kept) go with the old buffer.
  Snapshots* old_snaps = snapshots_.load(std::memory_order_acquire);
  auto snaps = std::make_unique<Snapshots>(*nrb, slot_);
  snaps->set_ring_size(old_snaps->ring_size());
  if (old_snaps->allocated() && snaps->allocate() < 0 && why) *why = "snapshot spares not reallocated";
  snapshots_.store(snaps.get(), std::memory_order_release);
  std::unique_ptr<rb::RingBuffer> gone;
  std::unique_ptr<Snapshots> gone_snaps;  // destroyed first: it refers to `gone`
  {
    base::MutexLock l(&mu_);
    if (readers_.load(std::memory_order_acquire) <= max_refs) {
      for (auto& b : buffers_)
        if (b.get() == old) gone = std::move(b);
      for (auto& sn : all_snapshots_)
        if (sn.get() == old_snaps) gone_snaps = std::move(sn);
    }
    std::erase(buffers_, nullptr);
    std::erase(all_snapshots_, nullptr);
    buffers_.push_back(std::move(fresh));
    all_snapshots_.push_back(std::move(snaps));
    buffer_file_ = path;
  }
  return 0;  // `gone` (if any) is freed here, outside the locks' critical parts
}

std::string Instance::buffer_file() const {
  base::MutexLock l(&mu_);
  return buffer_file_;
}

void Instance::apply_buffer_dir() {
  const char* dir = base::env("USRTRACE_BUFFER_DIR");
  if (!dir || !*dir) {
    // `usrtrace record -- COMMAND` asks for buffers it can map
    // (record/shared_buffers.cc); a buffer directory the user chose wins.
    const char* shared = base::env("USRTRACE_SHARED_BUFFERS");
    if (!shared || std::strcmp(shared, "1") != 0) return;
    std::string why;
    if (set_buffer_file(persist::kSharedMemory, 0, &why) < 0)
      log_error("buffer_file", why, "USRTRACE_SHARED_BUFFERS=1", 0);
    return;
  }
  std::string path = std::string(dir) + "/usrtrace-" + std::to_string(getpid()) + "-" +
                     (name_.empty() ? std::string("top") : name_) + ".buf";
  std::string why;
  if (set_buffer_file(path, 0, &why) < 0)
    log_error("buffer_file", why, std::string("USRTRACE_BUFFER_DIR=") + dir, 0);
}

}  // namespace usrtrace::instance
