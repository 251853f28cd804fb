#include "symbols/resolver.h"

#include <link.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "symbols/symbols.h"

namespace usrtrace::symbols {
namespace {

struct Entry {
  uint64_t addr, size;
  std::string name;
};

struct Table {
  std::vector<Entry> funcs;  // by address
  unsigned long long adds = 0;
};

std::mutex g_mu;
std::shared_ptr<const Table> g_table;

unsigned long long loaded_objects() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        *static_cast<unsigned long long*>(arg) = info->dlpi_adds;
        return 1;
      },
      &adds);
  return adds;
}

// Of the functions at one address (aliases: a debug file's
// __libc_start_main_impl and the exported __libc_start_main), the one a
// reader knows, as perf's choose_best_symbol picks it: global before
// local, then fewer leading underscores, then the shorter name.
bool better(const Symbol& a, const Symbol& b) {
  const bool ga = a.type == 'T', gb = b.type == 'T';
  if (ga != gb) return ga;
  const size_t ua = a.name.find_first_not_of('_'), ub = b.name.find_first_not_of('_');
  if (ua != ub) return ua < ub;
  return a.name.size() < b.name.size();
}

std::shared_ptr<const Table> load() {
  auto t = std::make_shared<Table>();
  t->adds = loaded_objects();
  const Symbol* pick = nullptr;  // the best so far at its address
  std::vector<Symbol> syms = load_process_symbols();
  for (const Symbol& s : syms) {
    if ((s.type != 't' && s.type != 'T') || s.unnamed) continue;
    if (pick != nullptr && pick->addr == s.addr) {
      if (better(s, *pick)) {
        pick = &s;
        t->funcs.back() = {s.addr, s.size, kallsyms_name(s.name)};
      }
      continue;
    }
    pick = &s;
    t->funcs.push_back({s.addr, s.size, kallsyms_name(s.name)});
  }
  return t;
}

const Entry* find(const Table& t, uint64_t addr) {
  auto it = std::upper_bound(t.funcs.begin(), t.funcs.end(), addr,
                             [](uint64_t a, const Entry& e) { return a < e.addr; });
  if (it == t.funcs.begin()) return nullptr;
  --it;
  // A size-0 symbol covers up to the next one.
  if (it->size != 0 && addr >= it->addr + it->size) return nullptr;
  return &*it;
}

}  // namespace

namespace {

// The entry covering addr, or nullptr; *keep holds the table it is in.
const Entry* covering(uint64_t addr, std::shared_ptr<const Table>* keep) {
  std::shared_ptr<const Table> t;
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!g_table) g_table = load();
    t = g_table;
  }
  const Entry* e = find(*t, addr);
  if (e == nullptr && loaded_objects() != t->adds) {
    std::lock_guard<std::mutex> l(g_mu);
    g_table = load();
    t = g_table;
    e = find(*t, addr);
  }
  *keep = std::move(t);
  return e;
}

}  // namespace

std::string Resolver::name(uint64_t addr, bool offset) {
  std::shared_ptr<const Table> t;
  const Entry* e = covering(addr, &t);
  char buf[64];
  if (e == nullptr) {
    snprintf(buf, sizeof buf, "0x%" PRIx64, addr);
    return buf;
  }
  if (!offset) return e->name;
  snprintf(buf, sizeof buf, "+0x%" PRIx64 "/0x%" PRIx64, addr - e->addr, e->size);
  return e->name + buf;
}

bool Resolver::lookup(uint64_t addr, std::string* name, uint64_t* offset) {
  std::shared_ptr<const Table> t;
  const Entry* e = covering(addr, &t);
  if (e == nullptr) return false;
  *name = e->name;
  *offset = addr - e->addr;
  return true;
}

void Resolver::invalidate() {
  std::lock_guard<std::mutex> l(g_mu);
  g_table.reset();
}

}  // namespace usrtrace::symbols
