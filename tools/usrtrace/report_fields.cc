#include "report_fields.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace usrtrace::tool {

namespace {

// Whether [off, off + size) lies within a record of `len` bytes.
bool within(int64_t off, int64_t size, uint32_t len) { return off >= 0 && size >= 0 && off + size <= len; }

}  // namespace

bool read_number(tep_handle* tep, const tep_format_field* fl, const uint8_t* data, uint32_t len,
                 uint64_t* out) {
  if (fl == nullptr || (fl->size != 1 && fl->size != 2 && fl->size != 4 && fl->size != 8) ||
      !within(fl->offset, fl->size, len))
    return false;
  *out = tep_read_number(tep, data + fl->offset, fl->size);
  return true;
}

FieldValue read_field(tep_handle* tep, const tep_format_field* fl, const uint8_t* data, uint32_t len) {
  FieldValue v;
  int64_t off = fl->offset, size = fl->size;
  if (fl->flags & TEP_FIELD_IS_DYNAMIC) {
    // A __data_loc (or __rel_loc) word: u32, offset in the low half, length
    // in the high half.
    if (size != 4 || !within(off, 4, len)) return v;
    uint32_t loc;
    std::memcpy(&loc, data + off, 4);
    off = loc & 0xffff;
    size = loc >> 16;
    if (fl->flags & TEP_FIELD_IS_RELATIVE) off += static_cast<int64_t>(fl->offset) + fl->size;
  } else if (size == 0 && (fl->flags & TEP_FIELD_IS_ARRAY)) {
    size = off >= 0 && off < len ? len - off : 0;  // char buf[]: the rest of the record
  }
  if (!within(off, size, len)) return v;
  const char* p = reinterpret_cast<const char*>(data + off);
  const bool chars = (fl->flags & TEP_FIELD_IS_STRING) || std::strstr(fl->type, "char") != nullptr;
  if ((fl->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC)) != 0) {
    if (chars) {
      size_t n = strnlen(p, static_cast<size_t>(size));
      while (n > 0 && p[n - 1] == '\n') --n;  // print's buf ends in a newline
      v.kind = FieldValue::kString;
      v.text.assign(p, n);
      return v;
    }
    char b[4];
    for (int64_t k = 0; k < size; ++k) {
      snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(p[k]));
      v.text += b;
    }
    v.kind = FieldValue::kBytes;
    return v;
  }
  if (size != 1 && size != 2 && size != 4 && size != 8) return v;
  const unsigned long long n = tep_read_number(tep, p, static_cast<int>(size));
  if (fl->flags & TEP_FIELD_IS_POINTER) {
    v.kind = FieldValue::kPointer;
    v.u = n;
  } else if (fl->flags & TEP_FIELD_IS_SIGNED) {
    long long sv = static_cast<long long>(n);
    if (size < 8) {
      const int shift = static_cast<int>(64 - 8 * size);
      sv = static_cast<long long>(n << shift) >> shift;
    }
    v.kind = FieldValue::kInt;
    v.i = sv;
  } else {
    v.kind = FieldValue::kUint;
    v.u = n;
  }
  return v;
}

std::vector<int> buffer_processes(const TraceFile& f, std::map<int, std::string>* names) {
  for (const TraceFile::ProcMap& pm : f.procmaps()) names->emplace(pm.pid, pm.comm);
  std::vector<int> buffer_pid;
  for (const TraceFile::Buffer& b : f.buffers()) {
    if (b.name == "kernel" && !f.procmaps().empty()) {
      names->emplace(0, "kernel");
      buffer_pid.push_back(0);
      continue;
    }
    int pid = f.procmaps().empty() ? 0 : f.procmaps()[0].pid;
    const std::string name = b.name.substr(0, b.name.find(':'));
    const size_t dash = name.rfind('-');
    if (dash != std::string::npos && dash + 1 < name.size() &&
        name.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
      const int p = std::atoi(name.c_str() + dash + 1);
      if (names->count(p)) pid = p;
    }
    buffer_pid.push_back(pid);
  }
  return buffer_pid;
}

}  // namespace usrtrace::tool
