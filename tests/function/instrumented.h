// The -finstrument-functions fixture of the function tracer tests.
#pragma once

extern "C" {
extern int fxt_calls_leaf, fxt_calls_outer, fxt_calls_recurse, fxt_calls_other, fxt_calls_fib;
int fxt_leaf(int x);
int fxt_outer(int n);           // calls fxt_leaf n times
int fxt_recurse(int depth);     // depth nested calls of itself
int fxt_fib(int n);             // fib(n) by tree recursion; each n >= 2 then calls fxt_leaf
int fxt_other(int x);           // calls fxt_leaf once
int fxt_catcher(int depth);     // throws through `depth`+1 fxt_thrower frames, catches, calls fxt_leaf
int fxt_around(void (*cb)());   // calls cb (not instrumented), then fxt_leaf
void fxt_spin_cpu(long ns);     // runs until the thread has used `ns` more of CPU time
void fxt_spin_caller(long ns);  // calls fxt_spin_cpu(ns)
void fxt_sleep_ms(int ms);      // sleeps
void fxt_sig_handler(int sig);  // a signal handler: calls fxt_leaf
void fxt_raiser(int sig);       // raises `sig` (handled by the time it returns)
}
