#include "standin_core.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "function/function.h"
#include "function/patch_internal.h"

namespace standin {
namespace {

constexpr int kWatch = 16;
constexpr int kDepth = 1 << 15;

struct Frame {
  uint64_t fn;
  uint64_t ret;
  uint64_t* slot;
  bool unhooked;
};

std::atomic<bool> g_redirect{false};
std::atomic<bool> g_clobber{false};
std::atomic<uint64_t> g_misaligned{0};

// Inline: the frame address must be the caller's (patched_entry's).
inline void check_alignment(const void* frame) {
  // order: relaxed: a counter read after the calls.
  if (reinterpret_cast<uintptr_t>(frame) & 15) g_misaligned.fetch_add(1, std::memory_order_relaxed);
}

// Every bit of the registers a call may clobber, not only what the
// compiler would touch. Each is a separate function with the target it
// needs, chosen at run time.
__attribute__((target("avx512f"), noinline)) void clobber_zmm() {
  asm volatile(
      "vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\t"
      "vmovdqa64 %%zmm0, %%zmm1\n\t vmovdqa64 %%zmm0, %%zmm2\n\t vmovdqa64 %%zmm0, %%zmm3\n\t"
      "vmovdqa64 %%zmm0, %%zmm4\n\t vmovdqa64 %%zmm0, %%zmm5\n\t vmovdqa64 %%zmm0, %%zmm6\n\t"
      "vmovdqa64 %%zmm0, %%zmm7\n\t vmovdqa64 %%zmm0, %%zmm8\n\t vmovdqa64 %%zmm0, %%zmm15" ::
          : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm15");
}
__attribute__((target("avx2"), noinline)) void clobber_ymm() {
  asm volatile(
      "vpcmpeqd %%ymm0, %%ymm0, %%ymm0\n\t"
      "vmovdqa %%ymm0, %%ymm1\n\t vmovdqa %%ymm0, %%ymm2\n\t vmovdqa %%ymm0, %%ymm3\n\t"
      "vmovdqa %%ymm0, %%ymm4\n\t vmovdqa %%ymm0, %%ymm5\n\t vmovdqa %%ymm0, %%ymm6\n\t"
      "vmovdqa %%ymm0, %%ymm7\n\t vmovdqa %%ymm0, %%ymm15\n\t"
      "vzeroupper" ::
          : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm15");
}
__attribute__((noinline)) void clobber_xmm() {
  asm volatile(
      "pcmpeqd %%xmm0, %%xmm0\n\t"
      "movdqa %%xmm0, %%xmm1\n\t movdqa %%xmm0, %%xmm2\n\t movdqa %%xmm0, %%xmm3\n\t"
      "movdqa %%xmm0, %%xmm4\n\t movdqa %%xmm0, %%xmm5\n\t movdqa %%xmm0, %%xmm6\n\t"
      "movdqa %%xmm0, %%xmm7\n\t movdqa %%xmm0, %%xmm15" ::
          : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm15");
}
void clobber_vectors() {
  if (!g_clobber.load(std::memory_order_relaxed)) return;
  if (__builtin_cpu_supports("avx512f")) {
    clobber_zmm();
  } else if (__builtin_cpu_supports("avx2")) {
    clobber_ymm();
  } else {
    clobber_xmm();
  }
}
std::atomic<uint64_t> g_watch[kWatch];
std::atomic<uint64_t> g_entries[kWatch], g_exits[kWatch];
std::atomic<uint64_t> g_pruned{0}, g_unhooks{0}, g_rehooks{0}, g_objects{0}, g_last_parent{0}, g_rehook_sp{0};

thread_local Frame t_stack[kDepth];
thread_local int t_depth = 0;

int slot_of(uint64_t fn) {
  for (int i = 0; i < kWatch; ++i)
    if (g_watch[i].load(std::memory_order_relaxed) == fn) return i;
  return -1;
}

}  // namespace

void set_redirect(bool on) { g_redirect.store(on); }
void set_clobber(bool on) { g_clobber.store(on); }
uint64_t misaligned_calls() { return g_misaligned.load(); }
void watch(uint64_t fn) {
  for (auto& w : g_watch) {
    uint64_t z = 0;
    if (w.load() == fn || w.compare_exchange_strong(z, fn)) return;
  }
}
uint64_t entries(uint64_t fn) {
  const int i = slot_of(fn);
  return i < 0 ? 0 : g_entries[i].load();
}
uint64_t exits(uint64_t fn) {
  const int i = slot_of(fn);
  return i < 0 ? 0 : g_exits[i].load();
}
uint64_t pruned() { return g_pruned.load(); }
uint64_t unhooks() { return g_unhooks.load(); }
uint64_t rehooks() { return g_rehooks.load(); }
uint64_t objects_changed_calls() { return g_objects.load(); }
int depth() { return t_depth; }
uint64_t last_parent() { return g_last_parent.load(); }
uint64_t last_rehook_sp() { return g_rehook_sp.load(); }
void reset() {
  for (int i = 0; i < kWatch; ++i) {
    g_entries[i] = 0;
    g_exits[i] = 0;
  }
  g_pruned = 0;
  g_misaligned = 0;
  g_unhooks = 0;
  g_rehooks = 0;
  t_depth = 0;
}

}  // namespace standin

namespace usrtrace::function {

using standin::Frame;
using standin::t_depth;
using standin::t_stack;

// order: relaxed everywhere below: counters read after threads are joined.
bool patched_entry(uint64_t fn, uint64_t parent, uint64_t* slot) {
  standin::check_alignment(__builtin_frame_address(0));
  standin::clobber_vectors();
  const int w = standin::slot_of(fn);
  if (w >= 0) {
    standin::g_entries[w].fetch_add(1, std::memory_order_relaxed);
    standin::g_last_parent.store(parent, std::memory_order_relaxed);
  }
  if (!standin::g_redirect.load(std::memory_order_relaxed) || t_depth == standin::kDepth) return false;
  // A new frame at `slot` means every frame at or below it is gone
  // (longjmp): a live frame's slot is above the stack pointer.
  while (t_depth > 0 && t_stack[t_depth - 1].slot <= slot) {
    --t_depth;
    standin::g_pruned.fetch_add(1, std::memory_order_relaxed);
  }
  t_stack[t_depth++] = Frame{fn, parent, slot, false};
  return true;
}

uint64_t patched_return(uint64_t* slot) {
  standin::check_alignment(__builtin_frame_address(0));
  standin::clobber_vectors();
  while (t_depth > 0 && t_stack[t_depth - 1].slot < slot) {  // left by longjmp
    --t_depth;
    standin::g_pruned.fetch_add(1, std::memory_order_relaxed);
  }
  if (t_depth == 0 || t_stack[t_depth - 1].slot != slot) {
    fprintf(stderr, "standin: return to %p not on the shadow stack\n", static_cast<void*>(slot));
    abort();
  }
  const Frame& f = t_stack[--t_depth];
  const int w = standin::slot_of(f.fn);
  if (w >= 0) standin::g_exits[w].fetch_add(1, std::memory_order_relaxed);
  return f.ret;
}

void shadow_unhook_all() {
  standin::g_unhooks.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < t_depth; ++i)
    if (!t_stack[i].unhooked) {
      *t_stack[i].slot = t_stack[i].ret;
      t_stack[i].unhooked = true;
    }
}

void shadow_rehook(uint64_t sp) {
  standin::g_rehooks.fetch_add(1, std::memory_order_relaxed);
  standin::g_rehook_sp.store(sp, std::memory_order_relaxed);
  while (t_depth > 0 && reinterpret_cast<uint64_t>(t_stack[t_depth - 1].slot) < sp) {
    --t_depth;
    standin::g_pruned.fetch_add(1, std::memory_order_relaxed);
  }
  for (int i = 0; i < t_depth; ++i)
    if (t_stack[i].unhooked) {
      *t_stack[i].slot = reinterpret_cast<uint64_t>(&usrtrace_function_return_hook);
      t_stack[i].unhooked = false;
    }
}

void objects_changed() { standin::g_objects.fetch_add(1, std::memory_order_relaxed); }

}  // namespace usrtrace::function
