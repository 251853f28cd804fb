// A program that knows nothing of usrtrace: built with
// usrtrace_trace_functions() (patchable entries), it is traced without a
// change to its source by
//
//   usrtrace record -p function_graph -o graph.dat -- ./graph_demo
//
// It handles a few "requests" (KEY=VALUE,...): parses, validates and sums
// them, one slowly, so that the graph shows nesting, leaves and a duration
// mark.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace demo {

struct Field {
  char key[16];
  long value;
};

__attribute__((noinline)) long parse_number(const char* s) { return std::strtol(s, nullptr, 10); }

__attribute__((noinline)) bool parse_field(const char* kv, size_t len, Field* out) {
  const char* eq = static_cast<const char*>(std::memchr(kv, '=', len));
  if (eq == nullptr || eq == kv || static_cast<size_t>(eq - kv) >= sizeof out->key) return false;
  std::memcpy(out->key, kv, static_cast<size_t>(eq - kv));
  out->key[eq - kv] = '\0';
  out->value = parse_number(eq + 1);
  return true;
}

__attribute__((noinline)) int parse_request(const char* text, Field* fields, int max) {
  int n = 0;
  for (const char* p = text; *p != '\0' && n < max;) {
    const char* end = std::strchr(p, ',');
    const size_t len = end ? static_cast<size_t>(end - p) : std::strlen(p);
    if (!parse_field(p, len, &fields[n])) return -1;
    ++n;
    p += len + (end ? 1 : 0);
  }
  return n;
}

__attribute__((noinline)) bool validate(const Field* fields, int n) {
  for (int i = 0; i < n; ++i)
    if (fields[i].value < 0) return false;
  return true;
}

// The slow part: a lookup that waits (as on a lock or a disk).
__attribute__((noinline)) long slow_lookup(long v) {
  const timespec ts{0, 200 * 1000};
  nanosleep(&ts, nullptr);
  return v * 2;
}

__attribute__((noinline)) long handle(const char* request) {
  Field fields[8];
  const int n = parse_request(request, fields, 8);
  if (n < 0 || !validate(fields, n)) return 0;
  long sum = 0;
  for (int i = 0; i < n; ++i)
    sum += std::strcmp(fields[i].key, "slow") == 0 ? slow_lookup(fields[i].value) : fields[i].value;
  return sum;
}

}  // namespace demo

int main() {
  const char* requests[] = {"a=1,b=2", "x=10,slow=5", "=bad"};
  long total = 0;
  for (const char* r : requests) total += demo::handle(r);
  std::printf("graph_demo: total %ld\n", total);
  return 0;
}
