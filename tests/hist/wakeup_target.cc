// wakeup_target: user events shaped as the kernel's sched_waking,
// sched_switch and tcp_probe (the fields histogram.rst section 2.2's
// examples name), for those examples to run verbatim on a user program.
// Driven line by line on stdin:
//
//   run N     N wakeups of a worker thread named "cyclictest": the main
//             thread ("main") writes sched_waking for the worker, wakes it,
//             and the worker writes sched_switch (prev = main, next =
//             itself) when it runs. The program measures each latency
//             itself and prints "lat PID US" (CLOCK_MONOTONIC from just
//             before the waking event to just after the switch event,
//             rounded to microseconds as the kernel's ns2usecs).
//   tcp       a fixed sequence of tcp_probe events, each printed as
//             "tcp DPORT CWND SND_WND SRTT RCV_WND"
//
// Each command is answered with "ok"; "ready PID" comes first.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "usrtrace/event.h"

USRTRACE_EVENT(sched, sched_waking, (char[16], comm)(int32_t, pid)(int32_t, prio)(int32_t, target_cpu),
               "comm=%s pid=%d prio=%d target_cpu=%03d", REC->comm, REC->pid, REC->prio, REC->target_cpu)
USRTRACE_EVENT(
    sched, sched_switch,
    (char[16], prev_comm)(int32_t, prev_pid)(int32_t, prev_prio)(int64_t, prev_state)(char[16], next_comm)(
        int32_t, next_pid)(int32_t, next_prio),
    "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%lld ==> next_comm=%s next_pid=%d next_prio=%d",
    REC->prev_comm, REC->prev_pid, REC->prev_prio, REC->prev_state, REC->next_comm, REC->next_pid,
    REC->next_prio)
USRTRACE_EVENT(tcp, tcp_probe,
               (uint16_t, dport)(uint32_t, snd_cwnd)(uint32_t, snd_wnd)(uint32_t, srtt)(uint32_t, rcv_wnd),
               "dport=%u snd_cwnd=%u snd_wnd=%u srtt=%u rcv_wnd=%u", REC->dport, REC->snd_cwnd, REC->snd_wnd,
               REC->srtt, REC->rcv_wnd)

namespace {

uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

int gettid_() { return static_cast<int>(syscall(SYS_gettid)); }

std::mutex mu;
std::condition_variable cv;
int wakeups = 0;  // given by main
int seen = 0;     // taken by the worker
bool quit = false;
uint64_t woken_at = 0;
int worker_tid = 0, main_tid = 0;

void worker() {
  pthread_setname_np(pthread_self(), "cyclictest");
  {
    std::lock_guard<std::mutex> l(mu);
    worker_tid = gettid_();
  }
  cv.notify_all();
  std::unique_lock<std::mutex> l(mu);
  while (true) {
    cv.wait(l, [] { return quit || wakeups > seen; });
    if (quit) return;
    ++seen;
    trace_sched_sched_switch("main", main_tid, 120, 1, "cyclictest", worker_tid, 19);
    const uint64_t lat = now_ns() - woken_at;
    printf("lat %d %llu\n", worker_tid, static_cast<unsigned long long>((lat + 500) / 1000));
    fflush(stdout);
    cv.notify_all();
  }
}

}  // namespace

int main() {
  pthread_setname_np(pthread_self(), "main");
  main_tid = gettid_();
  std::thread w(worker);
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [] { return worker_tid != 0; });
  }
  printf("ready %d\n", static_cast<int>(getpid()));
  fflush(stdout);
  std::string cmd;
  while (std::cin >> cmd) {
    if (cmd == "run") {
      int n = 0;
      std::cin >> n;
      for (int i = 0; i < n; ++i) {
        std::unique_lock<std::mutex> l(mu);
        woken_at = now_ns();
        trace_sched_sched_waking("cyclictest", worker_tid, 19, 0);
        ++wakeups;
        cv.notify_all();
        cv.wait(l, [] { return seen == wakeups; });
        l.unlock();
        // Different latencies: some wakeups find the worker's CPU busy.
        if (i % 3 == 0) usleep(200);
      }
    } else if (cmd == "tcp") {
      struct P {
        unsigned dport, cwnd, wnd, srtt, rcv;
      };
      const P seq[] = {{80, 10, 28000, 19000, 29000},  {443, 10, 26000, 17000, 28000},
                       {80, 10, 28960, 19604, 29312},  {1521, 8, 35000, 154000, 42000},
                       {443, 12, 26960, 17379, 28800}, {1521, 10, 35456, 154262, 42112},
                       {443, 12, 27000, 17400, 28900}};
      for (const P& p : seq) {
        trace_tcp_tcp_probe(static_cast<uint16_t>(p.dport), p.cwnd, p.wnd, p.srtt, p.rcv);
        printf("tcp %u %u %u %u %u\n", p.dport, p.cwnd, p.wnd, p.srtt, p.rcv);
      }
    } else {
      printf("unknown %s\n", cmd.c_str());
    }
    printf("ok\n");
    fflush(stdout);
  }
  {
    std::lock_guard<std::mutex> l(mu);
    quit = true;
  }
  cv.notify_all();
  w.join();
  return 0;
}
