#include "report_json.h"

#include <cinttypes>
#include <cstring>
#include <map>
#include <string>

namespace usrtrace::tool {
namespace {

void escape(std::string* out, const char* s, size_t n) {
  out->push_back('"');
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\r':
        *out += "\\r";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {  // keep the output ASCII: bytes as \u00XX
          char b[8];
          snprintf(b, sizeof b, "\\u%04x", c);
          *out += b;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}
void escape(std::string* out, const std::string& s) { escape(out, s.data(), s.size()); }

// One field's value as JSON.
void field_value(std::string* out, tep_handle* tep, const tep_format_field* fl, const uint8_t* data,
                 uint32_t len) {
  uint32_t off = static_cast<uint32_t>(fl->offset), size = static_cast<uint32_t>(fl->size);
  if (fl->flags & TEP_FIELD_IS_DYNAMIC) {
    if (off + 4 > len) return (void)(*out += "null");
    uint32_t loc;
    std::memcpy(&loc, data + off, 4);
    off = loc & 0xffff;
    size = loc >> 16;
    if (fl->flags & TEP_FIELD_IS_RELATIVE) off += static_cast<uint32_t>(fl->offset + fl->size);
  } else if (size == 0 && (fl->flags & TEP_FIELD_IS_ARRAY)) {
    size = off < len ? len - off : 0;  // char buf[]: the rest of the record
  }
  if (off > len || size > len - off) return (void)(*out += "null");
  const char* p = reinterpret_cast<const char*>(data + off);
  const bool chars = (fl->flags & TEP_FIELD_IS_STRING) || std::strstr(fl->type, "char") != nullptr;
  if ((fl->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC)) != 0) {
    if (chars) {
      size_t n = strnlen(p, size);
      while (n > 0 && p[n - 1] == '\n') --n;  // print's buf ends in a newline
      return escape(out, p, n);
    }
    std::string hex;
    char b[4];
    for (uint32_t i = 0; i < size; ++i) {
      snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(p[i]));
      hex += b;
    }
    return escape(out, hex);
  }
  if (size != 1 && size != 2 && size != 4 && size != 8) return (void)(*out += "null");
  const unsigned long long v = tep_read_number(tep, p, static_cast<int>(size));
  char b[32];
  if (fl->flags & TEP_FIELD_IS_POINTER) {
    snprintf(b, sizeof b, "\"0x%llx\"", v);
  } else if (fl->flags & TEP_FIELD_IS_SIGNED) {
    long long sv = static_cast<long long>(v);
    if (size < 8) {
      const int shift = static_cast<int>(64 - 8 * size);
      sv = static_cast<long long>(v << shift) >> shift;
    }
    snprintf(b, sizeof b, "%lld", sv);
  } else {
    snprintf(b, sizeof b, "%llu", v);
  }
  *out += b;
}

}  // namespace

int write_json(const TraceFile& f, const TepSession& session, TraceFile::Cursor& cursor, bool in_ns,
               const std::function<bool(const TraceFile::Record&, const char*)>& keep, FILE* out,
               Progress* progress) {
  tep_handle* tep = session.tep();
  std::string buf = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> comm, for the metadata events
  // The process each buffer's threads are in: usrtrace records one process
  // per buffer, named by the PROCMAPS options it writes (the first is the
  // recorded process; `record -c` names the others' buffers "COMM-PID" or
  // "COMM-PID:INSTANCE"). A file without them (the kernel's) gets pid 0.
  std::map<int, std::string> processes;  // pid -> name
  for (const TraceFile::ProcMap& pm : f.procmaps()) processes.emplace(pm.pid, pm.comm);
  std::vector<int> buffer_pid;
  for (const TraceFile::Buffer& b : f.buffers()) {
    int pid = f.procmaps().empty() ? 0 : f.procmaps()[0].pid;
    const std::string name = b.name.substr(0, b.name.find(':'));
    const size_t dash = name.rfind('-');
    if (dash != std::string::npos && dash + 1 < name.size() &&
        name.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
      const int p = std::atoi(name.c_str() + dash + 1);
      if (processes.count(p)) pid = p;
    }
    buffer_pid.push_back(pid);
  }
  bool first = true;
  TraceFile::Record r;
  trace_seq s;
  trace_seq_init(&s);
  uint64_t nrec = 0, done = 0, total = 0;
  if (progress) {
    cursor.progress(&done, &total);
    progress->update(done);
  }
  while (cursor.next(&r)) {
    if (progress && (++nrec & 0xfff) == 0) {
      cursor.progress(&done, &total);
      progress->update(done);
    }
    tep_record rec = session.make_record(r);
    const int tid = r.len >= 8 ? tep_data_pid(tep, &rec) : -1;
    const char* comm = tep_data_comm_from_pid(tep, tid);
    if (!keep(r, comm)) continue;
    const int pid = buffer_pid[static_cast<size_t>(r.buffer)];
    tep_event* ev = tep_find_event_by_record(tep, &rec);
    threads.emplace(std::make_pair(pid, tid), comm ? comm : "<...>");
    if (!first) buf += ",\n";
    first = false;
    // function_graph's entries and exits become begin/end slices named by
    // the function (they nest per thread); every other event is an instant.
    const char* ph = "\"i\",\"s\":\"t\"";
    std::string name = ev ? ev->name : "unknown";
    if (ev && std::strcmp(ev->system, "ftrace") == 0 &&
        (std::strcmp(ev->name, "funcgraph_entry") == 0 || std::strcmp(ev->name, "funcgraph_exit") == 0)) {
      unsigned long long func = 0;
      if (tep_format_field* ff = tep_find_field(ev, "func");
          ff && tep_read_number_field(ff, r.data, &func) == 0) {
        const char* fname = tep_find_function(tep, func);
        char hex[32];
        snprintf(hex, sizeof hex, "0x%llx", func);
        name = fname ? fname : hex;
        ph = ev->name[10] == 'e' && ev->name[11] == 'n' ? "\"B\"" : "\"E\"";
      }
    }
    buf += "{\"name\":";
    escape(&buf, name);
    buf += ",\"cat\":";
    escape(&buf, ev ? ev->system : "unknown");
    char head[160];
    const std::string& bname = f.buffers()[static_cast<size_t>(r.buffer)].name;
    if (in_ns)
      snprintf(head, sizeof head, ",\"ph\":%s,\"ts\":%" PRIu64 ".%03" PRIu64 ",\"pid\":%d,\"tid\":%d", ph,
               r.ts / 1000, r.ts % 1000, pid, tid);
    else
      snprintf(head, sizeof head, ",\"ph\":%s,\"ts\":%" PRIu64 ",\"pid\":%d,\"tid\":%d", ph, r.ts, pid, tid);
    buf += head;
    buf += ",\"args\":{\"cpu\":" + std::to_string(r.cpu);
    if (!bname.empty()) {
      buf += ",\"instance\":";
      escape(&buf, bname);
    }
    if (ev) {
      for (tep_format_field* fl = ev->format.fields; fl; fl = fl->next) {
        buf += ',';
        escape(&buf, fl->name);
        buf += ':';
        field_value(&buf, tep, fl, r.data, r.len);
      }
      trace_seq_reset(&s);
      tep_print_event(tep, &s, &rec, "%s", TEP_PRINT_INFO);
      unsigned int n = s.len;
      while (n > 0 && s.buffer[n - 1] == '\n') --n;
      buf += ",\"print\":";
      escape(&buf, s.buffer, n);
    }
    if (r.missed != 0) buf += ",\"events_lost_before\":" + std::to_string(r.missed);
    buf += "}}";
    if (buf.size() > (1u << 20)) {
      fwrite(buf.data(), 1, buf.size(), out);
      buf.clear();
    }
  }
  trace_seq_destroy(&s);
  if (progress) progress->done();
  // Process and thread names (Perfetto and chrome://tracing group the
  // tracks by them).
  std::map<int, bool> named;
  for (const auto& [key, comm] : threads) {
    const int pid = key.first;
    if (named[pid]) continue;
    named[pid] = true;
    buf += first ? "" : ",\n";
    first = false;
    buf += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":" + std::to_string(pid) + ",\"args\":{\"name\":";
    auto it = processes.find(pid);
    escape(&buf, it != processes.end() ? it->second
                 : f.uname().empty()   ? std::string("trace")
                                       : "trace (" + f.uname() + ")");
    buf += "}}";
  }
  for (const auto& [key, comm] : threads) {
    buf += first ? "" : ",\n";
    first = false;
    buf += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(key.first) +
           ",\"tid\":" + std::to_string(key.second) + ",\"args\":{\"name\":";
    escape(&buf, comm);
    buf += "}}";
  }
  buf += "\n]}\n";
  fwrite(buf.data(), 1, buf.size(), out);
  return fflush(out) == 0 ? 0 : 1;
}

}  // namespace usrtrace::tool
