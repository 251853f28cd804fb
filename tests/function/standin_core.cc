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
void watch(uint64_t fn) {
  for (auto& w : g_watch) {
    uint64_t z = 0;
    if (w.load() == fn || w.compare_exchange_strong(z, fn)) return;
  }
}
uint64_t entries(uint64_t fn) { const int i = slot_of(fn); return i < 0 ? 0 : g_entries[i].load(); }
uint64_t exits(uint64_t fn) { const int i = slot_of(fn); return i < 0 ? 0 : g_exits[i].load(); }
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
