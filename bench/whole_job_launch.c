// Runs a command and prints what the kernel accounted for it and the
// processes it waited for: "wall_s user_s sys_s peak_kib status".
//
// Why not from Python: a process forked from the benchmark's Python starts
// with Python's memory high-water mark, and the kernel carries it across
// exec into ru_maxrss, so no peak below about 20 MiB could be read. This
// program is exec'd, so the child it forks starts from its own few hundred
// KiB. (bench/whole_job.py compiles and uses it.)
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: whole_job_launch COMMAND [ARG...]\n");
    return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) return perror("fork"), 2;
  if (pid == 0) {
    execvp(argv[1], argv + 1);
    perror(argv[1]);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  // wait4's rusage is the child's and that of the descendants it waited for.
  if (wait4(pid, &status, 0, &ru) < 0) return perror("wait4"), 2;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  fprintf(stderr, "whole_job_launch: %.6f %ld.%06ld %ld.%06ld %ld %d\n", wall, (long)ru.ru_utime.tv_sec,
          (long)ru.ru_utime.tv_usec, (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec, ru.ru_maxrss, code);
  return code;
}
