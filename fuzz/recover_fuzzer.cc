// libFuzzer: a crash-surviving buffer file as untrusted input. The input is
// the tail of a small valid-looking file, so that the fuzzer reaches past
// the header checks: bytes 0..N of the input overwrite a real file's bytes
// starting at an offset the input's first 4 bytes choose; the reader must
// give an error or events that lie inside the file, never crash or hang.
#include <unistd.h>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/sys.h"
#include "persist/file_store.h"
#include "ring_buffer/ring_buffer.h"
#include "usrtrace/recover.h"

namespace {

std::vector<uint8_t> make_seed() {
  const std::string path = "/tmp/usrtrace-recover-fuzzer-" + std::to_string(getpid()) + ".buf";
  std::vector<uint8_t> bytes;
  {
    int err = 0;
    auto fs = usrtrace::persist::FileStore::create(path, 4096, usrtrace::base::nr_possible_cpus(), "f", &err);
    if (!fs) return bytes;
    fs->write_formats(std::string(8, '\0'));
    usrtrace::rb::Options o;
    o.size_per_cpu = 8192;
    o.store = fs;
    auto rb = usrtrace::rb::RingBuffer::create(o);
    if (!rb) return bytes;
    for (uint64_t i = 0; i < 600; ++i)
      rb->write<16>(&i);  // 16 bytes from i's address: the test reads no values
    FILE* f = fopen(path.c_str(), "rb");
    if (f) {
      uint8_t buf[65536];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
      fclose(f);
    }
  }
  unlink(path.c_str());
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<uint8_t> seed = make_seed();
  std::vector<uint8_t> bytes;
  if (size >= 1 && data[0] == 'R') {
    bytes.assign(data + 1, data + size);  // the raw input as a whole file
  } else if (size >= 4) {
    uint32_t at;
    std::memcpy(&at, data, 4);
    bytes = seed;
    if (!bytes.empty()) {
      size_t off = at % bytes.size();
      for (size_t i = 4; i < size && off < bytes.size(); ++i, ++off) bytes[off] = data[i];
      if (at & 0x80000000u) bytes.resize(at % bytes.size());  // truncated
    }
  } else {
    return 0;
  }
  std::string err;
  auto rec = usrtrace::Recovery::parse(std::move(bytes), &err);
  if (!rec) return 0;
  for (uint32_t tag : rec->tags())
    for (const auto& ev : rec->events(tag))
      if (ev.len > 65536 || (ev.len && ev.data[ev.len - 1] == 0x5a && ev.data[0] == 0xa5)) asm volatile("");
  return 0;
}
