// The program's symbols as the trace names functions with them
// (src/symbols): a stripped library's static functions come from its
// separate debug file, found as gdb finds it (.gnu_debuglink beside the
// library here; by build-id under /usr/lib/debug, for Debian's -dbg
// packages, in CliStart.StackFramesAreNamedFromSeparateDebugFiles).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "symbols/resolver.h"
#include "symbols/symbols.h"

namespace {

using usrtrace::symbols::load_process_symbols;
using usrtrace::symbols::Resolver;
using usrtrace::symbols::Symbol;

// The symbol at exactly `addr`, or nullptr.
const Symbol* at(const std::vector<Symbol>& syms, uint64_t addr) {
  for (const Symbol& s : syms)
    if (s.addr == addr) return &s;
  return nullptr;
}

void* hidden_address(const char* path, void** handle) {
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*handle == nullptr) return nullptr;
  auto fn = reinterpret_cast<void* (*)()>(dlsym(*handle, "debuglink_hidden_address"));
  return fn ? fn() : nullptr;
}

TEST(Symbols, AStrippedLibrarysStaticFunctionsComeFromItsDebugLink) {
  void* h = nullptr;
  void* hidden = hidden_address(DEBUGLINK_DSO, &h);
  ASSERT_NE(hidden, nullptr) << dlerror();
  const std::vector<Symbol> syms = load_process_symbols();
  const Symbol* s = at(syms, reinterpret_cast<uint64_t>(hidden));
  ASSERT_NE(s, nullptr) << "no symbol at the static function's address";
  EXPECT_EQ(s->name, "hidden_work");
  EXPECT_EQ(s->type, 't');
  EXPECT_GT(s->size, 0u);
  EXPECT_EQ(s->module, "libdebuglink_dso.so");
  Resolver::invalidate();
  std::string name;
  uint64_t off = 1;
  ASSERT_TRUE(Resolver::lookup(reinterpret_cast<uint64_t>(hidden) + 2, &name, &off));
  EXPECT_EQ(name, "hidden_work");
  EXPECT_EQ(off, 2u);
  dlclose(h);
}

// The same library without its debug file beside it: .dynsym holds no
// static function, so the unwind table gives it, by address alone
// ("MODULE+0xSTART", its size the FDE's); and a debug file of another build
// (its build-id differs) is not taken for it.
TEST(Symbols, NoDebugFileOrAnotherBuildsNamesStaticFunctionsByAddress) {
  for (const char* path : {DEBUGLINK_DSO_ALONE, DEBUGLINK_DSO_WRONG}) {
    SCOPED_TRACE(path);
    void* h = nullptr;
    void* hidden = hidden_address(path, &h);
    ASSERT_NE(hidden, nullptr) << dlerror();
    Dl_info info{};
    ASSERT_NE(dladdr(hidden, &info), 0);
    const std::vector<Symbol> syms = load_process_symbols();
    const Symbol* s = at(syms, reinterpret_cast<uint64_t>(hidden));
    ASSERT_NE(s, nullptr) << "the unwind table's function is not listed";
    std::string module = path;
    module = module.substr(module.rfind('/') + 1);
    char want[64];
    snprintf(want, sizeof want, "+0x%lx",
             static_cast<unsigned long>(reinterpret_cast<uintptr_t>(hidden) -
                                        reinterpret_cast<uintptr_t>(info.dli_fbase)));
    EXPECT_EQ(s->name, module + want);
    EXPECT_EQ(s->type, 't');
    EXPECT_GT(s->size, 0u);
    bool exported = false;  // .dynsym was read
    for (const Symbol& e : syms) exported |= e.name == "debuglink_call";
    EXPECT_TRUE(exported);
    dlclose(h);
  }
}

// process_symbols() keeps one table while the set of loaded objects stays
// the same, and reads a new one when an object comes (its functions are
// there) or goes (they are not), and when the debug file directory changes.
bool has_module(const std::vector<Symbol>& syms, const std::string& module) {
  for (const Symbol& s : syms)
    if (s.module == module) return true;
  return false;
}
TEST(Symbols, TheKeptTableChangesWhenAnObjectComesOrGoes) {
  using usrtrace::symbols::process_symbols;
  const auto first = process_symbols();
  EXPECT_EQ(process_symbols(), first);
  EXPECT_FALSE(has_module(*first, "libdebuglink_dso.so"));
  void* h = dlopen(DEBUGLINK_DSO, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  const auto loaded = process_symbols();
  EXPECT_NE(loaded, first);
  EXPECT_TRUE(has_module(*loaded, "libdebuglink_dso.so"));
  EXPECT_EQ(process_symbols(), loaded);
  setenv("USRTRACE_DEBUG_FILE_DIRECTORY", "/nonexistent", 1);
  const auto other_dir = process_symbols();
  unsetenv("USRTRACE_DEBUG_FILE_DIRECTORY");
  EXPECT_NE(other_dir, loaded);
  dlclose(h);
  const auto unloaded = process_symbols();
  EXPECT_FALSE(has_module(*unloaded, "libdebuglink_dso.so"));
}

}  // namespace
