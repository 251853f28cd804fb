/* The function the dynamic-probe benchmark probes (bench/probe_bench.cc):
 * plain -O2, no tracing flag, as a program nobody built for us. Its own
 * file, so that the compiler cannot see through the call. */
__attribute__((noinline)) int probe_bench_target(int x) { return x * 3 + 1; }
