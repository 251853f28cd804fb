// Writing a record into an instance's buffer (its tracing_cpumask and pid
// filter), and the built-in ftrace:print and ftrace:raw_data events.
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/compiler.h"
#include "base/rseq.h"
#include "events/builtin.h"
#include "events/flags.h"
#include "events/registry.h"
#include "instance/instance.h"
#include "instance/slot_write.h"
#include "usrtrace/event.h"
#include "writers/writers.h"

namespace usrtrace::events {
namespace {

// Writes with the inline fast path for every record length up to 256 bytes
// (the length is a template argument of the fast path), the slow path above.
using WriteFn = bool (*)(rb::RingBuffer*, const void*);
template <uint32_t kLen>
bool write_n(rb::RingBuffer* rb, const void* rec) {
  return rb->write<kLen>(rec);
}
template <uint32_t... kWords>
constexpr std::array<WriteFn, sizeof...(kWords)> make_writers(std::integer_sequence<uint32_t, kWords...>) {
  return {&write_n<(kWords + 1) * 4>...};
}
constexpr auto kWriters = make_writers(std::make_integer_sequence<uint32_t, 64>{});
static_assert(kWriters.size() * 4 == rb::RingBuffer::kMaxInlinePayload);

bool write_sized(rb::RingBuffer* rb, const void* rec, uint32_t len) {
  if (len <= rb::RingBuffer::kMaxInlinePayload && len % 4 == 0 && len >= 4)
    return kWriters[len / 4 - 1](rb, rec);
  return rb->write(rec, len);
}

}  // namespace

bool write_to_slot(int slot, const void* rec, uint32_t len, int tid) {
  rb::RingBuffer* rb = admit(slot, tid);
  return rb != nullptr && write_sized(rb, rec, len);
}

bool write_to_slot_at(int slot, const void* rec, uint32_t len, int tid, uint64_t tsc) {
  rb::RingBuffer* rb = admit(slot, tid);
  if (rb == nullptr) return false;
  // The function tracers' record lengths, inline; others out of line.
  static_assert(sizeof(FunctionRecord) == sizeof(GraphEntryRecord));
  if (len == sizeof(GraphEntryRecord)) return rb->write_at<sizeof(GraphEntryRecord)>(rec, tsc);
  if (len == sizeof(GraphExitRecord)) return rb->write_at<sizeof(GraphExitRecord)>(rec, tsc);
  return rb->write_at(rec, len, tsc);
}

namespace {

// ftrace:print (events/builtin.h): "caller: text", as the kernel prints it.
int print_print(const void* rec, uint32_t len, char* out, size_t size) {
  if (len < sizeof(PrintRecord)) return snprintf(out, size, "<bad print record>");
  uint64_t ip;
  std::memcpy(&ip, static_cast<const char*>(rec) + offsetof(PrintRecord, ip), sizeof ip);
  const char* text = static_cast<const char*>(rec) + sizeof(PrintRecord);
  int n = static_cast<int>(strnlen(text, len - sizeof(PrintRecord)));
  if (ip == 0) return snprintf(out, size, "tracing_mark_write: %.*s", n, text);
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(ip), &info) && info.dli_sname)
    return snprintf(out, size, "%s: %.*s", info.dli_sname, n, text);
  return snprintf(out, size, "0x%llx: %.*s", static_cast<unsigned long long>(ip), n, text);
}

constinit internal::EventDesc g_print_desc = builtin_desc<PrintEvent>(&print_print);

// ftrace:raw_data (events/builtin.h).
int print_raw(const void* rec, uint32_t len, char* out, size_t size) {
  if (len < sizeof(RawDataRecord)) return snprintf(out, size, "<bad raw_data record>");
  uint32_t id;
  std::memcpy(&id, static_cast<const char*>(rec) + offsetof(RawDataRecord, id), sizeof id);
  // The kernel's trace_raw_data(): every stored byte, padding included.
  int n = snprintf(out, size, "# %x buf:", id);
  const auto* p = static_cast<const unsigned char*>(rec) + sizeof(RawDataRecord);
  for (uint32_t i = 0; i < len - sizeof(RawDataRecord) && n >= 0 && static_cast<size_t>(n) < size; ++i)
    n += snprintf(out + n, size - static_cast<size_t>(n), " %02x", p[i]);
  return n;
}

constinit internal::EventDesc g_raw_desc = builtin_desc<RawDataEvent>(&print_raw);

struct RegisterBuiltins {
  RegisterBuiltins() {
    Registry::get().add(&g_print_desc);
    Registry::get().add(&g_raw_desc);
  }
};
__attribute__((init_priority(102))) RegisterBuiltins g_register_builtins;

std::atomic<MarkerWriter> g_marker_writer{nullptr};

// Writes a built-in ftrace record (marker, raw marker) into one instance,
// from the writer's own context: depth 1, as the kernel shows trace_marker
// writes (preempt-depth 1). `triggers`: a trace_marker write, which goes
// through ftrace:print's triggers when it has some (the control bit).
void write_marker_record(int slot, char* rec, uint32_t len, bool triggers) {
  writers::ThreadState* t = writers::enter();
  if (!t) return;
  fill_common(rec, *t);
  auto* h = reinterpret_cast<internal::CommonHeader*>(rec);
  h->preempt_count = static_cast<uint8_t>(h->preempt_count + 1);
  // order: relaxed is enough for the bit; acquire on the writer pairs with
  // the release that stored it before the bit was set.
  if (triggers &&
      USRTRACE_UNLIKELY(g_print_desc.enabled.load(std::memory_order_relaxed) >> internal::kControlBit)) {
    if (MarkerWriter w = g_marker_writer.load(std::memory_order_acquire)) {
      w(g_print_desc, rec, len, *t, uint64_t{1} << slot);
      writers::exit(*t);
      return;
    }
  }
  write_to_slot(slot, rec, len, t->tid);
  writers::exit(*t);
}

long print_record(int slot, std::string_view text, uint64_t ip, bool triggers) {
  alignas(8) char buf[internal::kMaxRecord + 8];
  auto* r = reinterpret_cast<PrintRecord*>(buf);
  r->common.type = g_print_desc.id;
  r->ip = ip;
  const size_t room = internal::kMaxRecord - sizeof(PrintRecord) - 2;
  const size_t n = text.size() < room ? text.size() : room;
  char* text_out = buf + sizeof(PrintRecord);
  std::memcpy(text_out, text.data(), n);
  size_t end = n;
  if (n == 0 || text_out[n - 1] != '\n') text_out[end++] = '\n';
  text_out[end++] = 0;
  uint32_t len = internal::pad_record(buf, static_cast<uint32_t>(sizeof(PrintRecord) + end));
  write_marker_record(slot, buf, len, triggers);
  return static_cast<long>(n);
}

}  // namespace

void set_marker_writer(MarkerWriter w) { g_marker_writer.store(w, std::memory_order_release); }

const internal::EventDesc& print_event() { return g_print_desc; }

long write_print(int slot, std::string_view text, uint64_t ip) { return print_record(slot, text, ip, false); }

long write_marker(int slot, std::string_view text) { return print_record(slot, text, 0, true); }

long write_raw(int slot, std::string_view data) {
  if (data.size() < 4) return -EINVAL;
  if (data.size() - 4 > internal::kMaxRecord - sizeof(RawDataRecord)) return -EINVAL;
  alignas(8) char buf[internal::kMaxRecord + 8];
  auto* r = reinterpret_cast<RawDataRecord*>(buf);
  r->common.type = g_raw_desc.id;
  std::memcpy(&r->id, data.data(), 4);
  std::memcpy(buf + sizeof(RawDataRecord), data.data() + 4, data.size() - 4);
  uint32_t len = internal::pad_record(buf, static_cast<uint32_t>(sizeof(RawDataRecord) + data.size() - 4));
  write_marker_record(slot, buf, len, false);
  return static_cast<long>(data.size());
}

}  // namespace usrtrace::events
