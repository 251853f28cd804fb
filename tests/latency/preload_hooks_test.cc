// The preloaded runtime's hooks for the latency tracers, in a process that
// runs with libusrtrace-preload.so as `usrtrace record` starts one: the
// program blocks signals and waits on condition variables, semaphores and
// eventfds with the plain libc calls, and the tracers see them.
//
// The test re-executes itself with LD_PRELOAD when started without it.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include "usrtrace/usrtrace.h"

namespace {

std::string rd(const std::string& path) {
  std::string out(1 << 20, '\0');
  const long n = usrtrace_tracefs_read(path.c_str(), out.data(), out.size());
  EXPECT_GE(n, 0) << path;
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}
long wr(const std::string& path, const std::string& text) {
  return usrtrace_tracefs_write(path.c_str(), text.data(), text.size());
}
long max_us() { return std::stol(rd("instances/hooks/tracing_max_latency")); }

uint64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}
void spin_us(uint64_t us) {
  const uint64_t end = now_ns() + us * 1000;
  while (now_ns() < end) {
  }
}

class PreloadHooks : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(dlsym(RTLD_DEFAULT, "usrtrace_preload_next"), nullptr) << "not preloaded";
    usrtrace_tracefs_rmdir("instances/hooks");
    ASSERT_EQ(usrtrace_tracefs_mkdir("instances/hooks"), 0);
  }
  void TearDown() override {
    wr("instances/hooks/current_tracer", "nop");
    usrtrace_tracefs_rmdir("instances/hooks");
  }
};

TEST_F(PreloadHooks, SigsoffSeesPthreadSigmaskAndSigprocmask) {
  ASSERT_GT(wr("instances/hooks/current_tracer", "sigsoff"), 0);
  sigset_t s, old;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  sigaddset(&s, SIGUSR2);
  const uint64_t t0 = now_ns();
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &s, &old), 0);
  spin_us(2000);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
  const uint64_t t1 = now_ns();
  const long first = max_us();
  EXPECT_GE(first, 2000);
  EXPECT_LE(first, static_cast<long>((t1 - t0) / 1000) + 1);
  const std::string trace = rd("instances/hooks/trace");
  EXPECT_NE(trace.find("# tracer: sigsoff"), std::string::npos) << trace;
  EXPECT_NE(trace.find("=> started at: "), std::string::npos) << trace;
  // sigprocmask, longer: the new worst case.
  ASSERT_EQ(sigprocmask(SIG_BLOCK, &s, nullptr), 0);
  spin_us(4000);
  ASSERT_EQ(sigprocmask(SIG_UNBLOCK, &s, nullptr), 0);
  EXPECT_GE(max_us(), 4000);
  // A block that adds nothing (already blocked) is no section.
  ASSERT_EQ(wr("instances/hooks/tracing_max_latency", "0"), 1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &s, nullptr), 0);
  spin_us(1000);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &s, nullptr), 0);  // nested: still the same section
  spin_us(1000);
  ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &s, nullptr), 0);
  EXPECT_GE(max_us(), 2000);
}

TEST_F(PreloadHooks, WakeupSeesConditionVariables) {
  ASSERT_GT(wr("instances/hooks/current_tracer", "wakeup"), 0);
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::atomic<bool> waiting{false};
  std::thread waiter([&] {
    std::unique_lock<std::mutex> l(mu);
    waiting = true;
    cv.wait(l, [&] { return ready; });  // pthread_cond_wait
  });
  while (!waiting) std::this_thread::yield();
  {
    std::lock_guard<std::mutex> l(mu);  // free once the waiter is in wait()
    ready = true;
    cv.notify_one();  // pthread_cond_signal
    spin_us(3000);    // the waiter needs the mutex to run on
  }
  waiter.join();
  EXPECT_GE(max_us(), 3000);
  const std::string trace = rd("instances/hooks/trace");
  EXPECT_NE(trace.find("# tracer: wakeup"), std::string::npos) << trace;
  EXPECT_NE(trace.find("=> started at: pthread_cond_signal"), std::string::npos) << trace;
}

// A SCHED_FIFO notifier on the waiter's CPU keeps it from running for
// `hold` us after the notification. Needs CAP_SYS_NICE.
// Whether thread `tid` is asleep (blocked in the kernel).
bool asleep(int tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  char buf[512] = {};
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  const char* close_paren = strrchr(buf, ')');  // the name may hold anything
  return n > 0 && close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] == 'S';
}

template <class Wait, class Notify>
bool held_wake(Wait wait, Notify notify, uint64_t hold) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  std::atomic<int> tid{0};
  std::thread waiter([&] {
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    tid = static_cast<int>(gettid());
    wait();
  });
  while (tid == 0) std::this_thread::yield();
  // Notified only once it blocks: a wait that begins after the
  // notification is not woken by it.
  while (!asleep(tid)) std::this_thread::yield();
  bool ok = false;
  std::thread notifier([&] {
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    sched_param sp{};
    sp.sched_priority = 10;
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) != 0) {
      notify();
      return;
    }
    ok = true;
    notify();
    spin_us(hold);
  });
  notifier.join();
  waiter.join();
  return ok;
}

TEST_F(PreloadHooks, WakeupSeesSemaphoresAndEventfds) {
  ASSERT_GT(wr("instances/hooks/current_tracer", "wakeup"), 0);
  sem_t sem;
  sem_init(&sem, 0, 0);
  if (!held_wake([&] { sem_wait(&sem); }, [&] { sem_post(&sem); }, 3000))
    GTEST_SKIP() << "SCHED_FIFO is not allowed here (needs CAP_SYS_NICE)";
  sem_destroy(&sem);
  EXPECT_GE(max_us(), 3000);
  EXPECT_NE(rd("instances/hooks/trace").find("=> started at: sem_post"), std::string::npos);
  ASSERT_EQ(wr("instances/hooks/tracing_max_latency", "0"), 1);
  const int fd = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  held_wake(
      [&] {
        eventfd_t v;
        eventfd_read(fd, &v);
      },
      [&] { eventfd_write(fd, 1); }, 3000);
  close(fd);
  EXPECT_GE(max_us(), 3000);
  EXPECT_NE(rd("instances/hooks/trace").find("=> started at: eventfd_write"), std::string::npos);
}

}  // namespace

int main(int argc, char** argv) {
  if (dlsym(RTLD_DEFAULT, "usrtrace_preload_next") == nullptr && getenv("USRTRACE_HOOKS_REEXEC") == nullptr) {
    // As `usrtrace record` runs a program: the runtime preloaded.
    setenv("LD_PRELOAD", USRTRACE_PRELOAD_LIB, 1);
    setenv("USRTRACE_HOOKS_REEXEC", "1", 1);
    const char* asan = getenv("ASAN_OPTIONS");
    const std::string o = std::string(asan ? asan : "") + (asan ? ":" : "") + "verify_asan_link_order=0";
    setenv("ASAN_OPTIONS", o.c_str(), 1);
    execv("/proc/self/exe", argv);
    perror("execv");
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
