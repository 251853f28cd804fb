#include "report_json.h"

#include <cinttypes>
#include <cstring>
#include <map>
#include <string>

#include "report_fields.h"

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
  const FieldValue v = read_field(tep, fl, data, len);
  char b[32];
  switch (v.kind) {
    case FieldValue::kNone:
      *out += "null";
      return;
    case FieldValue::kString:
    case FieldValue::kBytes:
      return escape(out, v.text);
    case FieldValue::kPointer:
      snprintf(b, sizeof b, "\"0x%llx\"", static_cast<unsigned long long>(v.u));
      break;
    case FieldValue::kInt:
      snprintf(b, sizeof b, "%lld", static_cast<long long>(v.i));
      break;
    case FieldValue::kUint:
      snprintf(b, sizeof b, "%llu", static_cast<unsigned long long>(v.u));
      break;
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
  std::map<int, std::string> processes;                // pid -> name
  const std::vector<int> buffer_pid = buffer_processes(f, &processes);
  bool first = true;
  trace_seq s;
  trace_seq_init(&s);
  for_each_kept(
      session, cursor, buffer_pid, keep, progress,
      [&](const TraceFile::Record& r, tep_record& rec, int tid, const char* comm, int pid) {
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
          uint64_t func = 0;
          if (read_number(tep, tep_find_field(ev, "func"), r.data, r.len, &func)) {
            const char* fname = tep_find_function(tep, func);
            char hex[32];
            snprintf(hex, sizeof hex, "0x%" PRIx64, func);
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
          snprintf(head, sizeof head, ",\"ph\":%s,\"ts\":%" PRIu64 ",\"pid\":%d,\"tid\":%d", ph, r.ts, pid,
                   tid);
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
      });
  trace_seq_destroy(&s);
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
