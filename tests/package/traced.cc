// A program built against the installed libusrtrace-dev (pkg-config), for
// tests/package/package_test.sh: it writes one pkgtest:hello event, says
// "ready PID" and waits for the end of its input, so that the installed
// command and completion have a live process to find.
#include <unistd.h>

#include <usrtrace/event.h>
#include <cstdio>

USRTRACE_EVENT(pkgtest, hello, (int32_t, n), "n=%d", REC->n)

int main() {
  trace_pkgtest_hello(1);
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
