// TraceFile::EventFilter: the filter compiler of src/filter applied to an
// event known only by its format file (a recorded file's event). The format
// text is parsed into the FieldDesc table that compiled-in events have.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "filter/filter.h"
#include "usrtrace/tracedat.h"

namespace usrtrace {

using internal::EventDesc;
using internal::FieldDesc;
using internal::FieldKind;

struct TraceFile::EventFilter::Impl {
  std::deque<std::string> strings;  // names and types the FieldDescs point at
  std::vector<FieldDesc> fields;
  EventDesc desc{};
  std::unique_ptr<filter::Program> program;
};

namespace {

// "\\tfield:TYPE NAME;\\toffset:N;\\tsize:N;\\tsigned:N;" -> a FieldDesc; false if
// the line is not a field line or is a common field.
bool parse_field(const std::string& line, TraceFile::EventFilter::Impl* impl, bool* ok) {
  const size_t f = line.find("field:");
  if (f == std::string::npos) return false;
  const size_t semi = line.find(';', f);
  if (semi == std::string::npos) return *ok = false;
  std::string decl = line.substr(f + 6, semi - f - 6);
  auto num = [&](const char* key, long* out) {
    const size_t k = line.find(key, semi);
    if (k == std::string::npos) return false;
    *out = std::strtol(line.c_str() + k + std::strlen(key), nullptr, 10);
    return true;
  };
  long offset = 0, size = 0, sign = 0;
  if (!num("offset:", &offset) || !num("size:", &size) || !num("signed:", &sign) || offset < 0 ||
      offset > 65535 || size < 0 || size > 65535)
    return *ok = false;
  while (!decl.empty() && decl.back() == ' ') decl.pop_back();
  // The name: the last identifier, before any [N].
  size_t end = decl.size();
  long array_len = -1;
  if (end > 0 && decl[end - 1] == ']') {
    const size_t open = decl.rfind('[');
    if (open == std::string::npos) return *ok = false;
    array_len = open + 1 < end - 1 ? std::strtol(decl.c_str() + open + 1, nullptr, 10) : 0;
    end = open;
  }
  size_t start = end;
  while (start > 0 && (std::isalnum(static_cast<unsigned char>(decl[start - 1])) || decl[start - 1] == '_'))
    --start;
  if (start == end) return *ok = false;
  std::string name = decl.substr(start, end - start);
  std::string type = decl.substr(0, start);
  while (!type.empty() && type.back() == ' ') type.pop_back();
  if (name.rfind("common_", 0) == 0) return false;
  FieldDesc d{};
  d.offset = static_cast<uint16_t>(offset);
  d.size = static_cast<uint16_t>(size);
  d.is_signed = sign != 0;
  d.array_len = 0;
  const bool data_loc = type.rfind("__data_loc", 0) == 0;
  const bool is_char = type.find("char") != std::string::npos;
  if (data_loc) {
    d.kind = is_char ? FieldKind::kString : FieldKind::kDynBytes;
  } else if (array_len >= 0) {
    d.kind =
        is_char && type.find("unsigned") == std::string::npos ? FieldKind::kCharArray : FieldKind::kByteArray;
    d.array_len = static_cast<uint16_t>(std::min<long>(array_len, 65535));
  } else if (type.find('*') != std::string::npos) {
    d.kind = FieldKind::kPointer;
  } else if (type == "bool" || type == "_Bool") {
    d.kind = FieldKind::kBool;
  } else {
    if (size != 1 && size != 2 && size != 4 && size != 8) return *ok = false;
    d.kind = FieldKind::kInteger;
  }
  impl->strings.push_back(name);
  d.name = impl->strings.back().c_str();
  impl->strings.push_back(type);
  d.type = impl->strings.back().c_str();
  impl->fields.push_back(d);
  return true;
}

}  // namespace

TraceFile::EventFilter::EventFilter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceFile::EventFilter::~EventFilter() = default;

std::unique_ptr<TraceFile::EventFilter> TraceFile::EventFilter::compile(const std::string& format,
                                                                        const std::string& expr,
                                                                        std::string* err) {
  auto impl = std::make_unique<Impl>();
  size_t pos = 0;
  bool ok = true;
  long id = -1;
  std::string name;
  while (pos < format.size()) {
    size_t nl = format.find('\n', pos);
    if (nl == std::string::npos) nl = format.size();
    const std::string line = format.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("ID:", 0) == 0)
      id = std::strtol(line.c_str() + 3, nullptr, 10);
    else if (line.rfind("name:", 0) == 0)
      name = line.substr(
          line.find_first_not_of(' ', 5) == std::string::npos ? 5 : line.find_first_not_of(' ', 5));
    else
      parse_field(line, impl.get(), &ok);
    if (!ok || impl->fields.size() > 1024) break;
  }
  if (!ok || id < 0 || id > 65535) {
    *err = "the event's format cannot be read";
    return nullptr;
  }
  impl->strings.push_back(name);
  impl->desc.name = impl->strings.back().c_str();
  impl->desc.system = "";
  impl->desc.fields = impl->fields.data();
  impl->desc.nfields = static_cast<uint16_t>(impl->fields.size());
  impl->desc.id = static_cast<uint16_t>(id);
  filter::Error e;
  impl->program = filter::Program::compile(impl->desc, expr, &e);
  if (!impl->program) {
    *err = filter::error_text(expr, e);
    return nullptr;
  }
  return std::unique_ptr<EventFilter>(new EventFilter(std::move(impl)));
}

uint16_t TraceFile::EventFilter::id() const { return impl_->desc.id; }

bool TraceFile::EventFilter::match(const Record& r, const char* comm) const {
  filter::Context ctx;
  ctx.cpu = r.cpu;
  ctx.comm = comm ? comm : "";
  return impl_->program->match(r.data, r.len, ctx);
}

}  // namespace usrtrace
