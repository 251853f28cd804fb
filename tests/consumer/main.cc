// A user of usrtrace: a typed event, printk through both APIs, enabling from
// code, and reading the trace back. Exits nonzero if anything is missing.
#include <usrtrace/usrtrace.hpp>

#include <pthread.h>

#include <cstdio>
#include <string>

USRTRACE_EVENT(consumer, hello, (int32_t, n)(const char*, who), "n=%d who=%s", REC->n, __get_str(who))

namespace {

int fail(const char* what, const std::string& trace) {
  std::fprintf(stderr, "consumer: %s\n--- trace:\n%s---\n", what, trace.c_str());
  return 1;
}

}  // namespace

int main() {
  auto app = usrtrace::Instance::get_by_name("consumer");
  if (!app) return fail(app.message(), "");
  if (app->set_event("consumer", "hello", true) != 1) return fail("set_event", "");
  if (app->set_event("usrtrace", "thread_rename", true) != 1) return fail("set_event", "");

  // pthread_setname_np reaches usrtrace's interposer, shared or static.
  pthread_setname_np(pthread_self(), "consumer-main");
  trace_consumer_hello(42, "world");
  app->print("fmt says {}", 7);
  usrtrace_array* tr = usrtrace_array_lookup("consumer");
  if (!tr) return fail("usrtrace_array_lookup", "");
  usrtrace_array_printk(tr, "c says %d\n", 8);
  usrtrace_array_put(tr);

  auto trace = app->read("trace");
  if (!trace) return fail(trace.message(), "");
  for (const char* want :
       {"hello: n=42 who=world\n", ": fmt says 7\n", ": c says 8\n", "newcomm=consumer-main\n"})
    if (trace->find(want) == std::string::npos) return fail(want, *trace);

  // The same file through the C API, and nothing of it in the top instance.
  char buf[1 << 16];
  long n = usrtrace_tracefs_read("instances/consumer/trace", buf, sizeof buf);
  if (n < 0 || std::string(buf, static_cast<size_t>(n)) != *trace)
    return fail("usrtrace_tracefs_read differs", *trace);
  auto top = usrtrace::Instance::top().read("trace");
  if (!top || top->find("who=world") != std::string::npos) return fail("top has it", *top);

  if (int r = app->destroy(); r != 0) return fail("destroy", "");
  std::puts("consumer: ok");
  return 0;
}
