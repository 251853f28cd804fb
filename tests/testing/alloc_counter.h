// Counting allocations in a test binary: every malloc/calloc/realloc/free
// (operator new included, which calls malloc) while `g_armed` is set, by
// replacing glibc's allocator entry points (or, under a sanitizer, which
// owns malloc, through its hooks). Include from exactly one file of a
// binary; call install_counter() first. Used by the crash handler's test
// and by the write path's (hist triggers with variables and actions).
#pragma once

#include <errno.h>
#include <signal.h>
#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ALLOC_COUNTER_SANITIZER 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ALLOC_COUNTER_SANITIZER 1
#endif
#endif

static volatile sig_atomic_t g_armed = 0;
static volatile sig_atomic_t g_allocs = 0;

static void count() {
  if (g_armed) g_allocs = g_allocs + 1;
}

#ifdef ALLOC_COUNTER_SANITIZER
// The sanitizer owns malloc; it calls these hooks on every allocation.
// (Declared here: g++ 12 ships no sanitizer/allocator_interface.h.)
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*)(const volatile void*, size_t),
                                                         void (*)(const volatile void*));
static void malloc_hook(const volatile void*, size_t) { count(); }
static void free_hook(const volatile void*) { count(); }
static void install_counter() { __sanitizer_install_malloc_and_free_hooks(malloc_hook, free_hook); }
#else
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void free(void* p) {
  count();
  __libc_free(p);
}
void* memalign(size_t a, size_t n) {
  count();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  count();
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}  // extern "C"
static void install_counter() {}
#endif
