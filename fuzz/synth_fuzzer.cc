// Writes arbitrary text to synthetic_events' parser (src/hist/synth.h) as
// definitions and removals, and (first byte's bit 0) each line again as a
// dynamic_events line; then generates every event defined with values
// taken from the input (numbers; strings pointing at valid buffers: the
// input, an empty string, a long one, null; stacks of any claimed depth),
// reads the records back from the top buffer and prints them. Must never
// crash, leak or hang; an error's caret must be in its command; a listed
// line must define its event again (EEXIST) and, after '!', remove it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "events/registry.h"
#include "hist/synth.h"
#include "instance/instance.h"

namespace {

namespace synth = usrtrace::hist::synth;

void check_error(int rc, const synth::Error& e) {
  if (rc > 0) abort();
  if (rc == 0) return;
  if (!e.text.empty() && e.pos > e.command.size()) abort();
  if (e.text.empty() && rc != -ENOENT && rc != -EBUSY && rc != -EINVAL) abort();
}

// The names in events_text(): each line up to its tab.
std::vector<std::string> names() {
  std::vector<std::string> out;
  const std::string text = synth::events_text();
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(at, nl - at);
    out.push_back(line.substr(0, line.find('\t')));
    at = nl + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  usrtrace::instance::Instance* top = usrtrace::instance::Instance::top();
  if (top == nullptr) abort();
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  synth::Error e;
  size_t at = 0;
  int rc = synth::write_text(text, &e, &at);
  check_error(rc, e);
  if (rc < 0 && at > text.size()) abort();
  if (mode & 1) {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      synth::Error de;
      check_error(synth::write_dynamic(text.substr(pos, nl - pos), &de), de);
      pos = nl + 1;
    }
  }
  (void)synth::dynamic_text();

  usrtrace::events::Registry::get().set_enabled(top->slot(), "synthetic", "*", true);
  // The values: the input as a string, and as numbers.
  const std::string str(text);
  const std::string long_str(600, 'L');
  uint64_t stack[1 + 70];
  for (size_t i = 0; i < 71; ++i) stack[i] = 0x400000 + i * 16;
  size_t cursor = 0;
  auto next = [&]() {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = (v << 8) | data[(cursor++) % size];
    return v;
  };
  for (const std::string& name : names()) {
    std::shared_ptr<synth::Event> ev = synth::find(name);
    if (ev == nullptr) abort();
    const auto& fields = synth::fields(*ev);
    if (fields.empty() || fields.size() > synth::kMaxFields) abort();
    for (int round = 0; round < 3; ++round) {
      uint64_t vals[synth::kMaxFields];
      for (size_t i = 0; i < fields.size(); ++i) {
        const uint64_t v = next();
        if (fields[i].is_stack) {
          stack[0] = v % 100;  // the claim may exceed 64: trace() stops there
          vals[i] = v % 5 == 0 ? 0 : reinterpret_cast<uint64_t>(stack);
        } else if (fields[i].is_string) {
          const char* pick[] = {str.c_str(), "", long_str.c_str(), nullptr};
          vals[i] = reinterpret_cast<uint64_t>(pick[v % 4]);
        } else {
          vals[i] = v;
        }
      }
      synth::trace(*ev, vals, round == 2 ? fields.size() - 1 : fields.size());
    }
  }
  // Read the records back and print them.
  usrtrace::rb::Event re;
  char out[8192];
  for (int n = 0; n < 4096 && top->buffer().consume(&re); ++n) {
    usrtrace::internal::CommonHeader h;
    if (re.len < sizeof h) abort();
    std::memcpy(&h, re.data, sizeof h);
    const auto* d = usrtrace::events::Registry::get().by_id(h.type);
    if (d == nullptr) continue;
    const int len = d->print(re.data, re.len, out, sizeof out);
    if (len < 0) abort();
  }

  usrtrace::events::Registry::get().set_enabled(top->slot(), "synthetic", "*", false);
  const std::string listing = synth::events_text();
  for (size_t pos = 0; pos < listing.size();) {
    const size_t nl = listing.find('\n', pos);
    const std::string line = listing.substr(pos, nl - pos);
    synth::Error le;
    if (synth::write_text(line, &le, nullptr) != -EEXIST) abort();
    if (synth::write_text("!" + line, &le, nullptr) != 0) abort();
    pos = nl + 1;
  }
  if (synth::count() != 0) abort();
  return 0;
}
