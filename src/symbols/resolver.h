// Addresses to function names for the trace text (the function tracers'
// ip and parent_ip), from the program's symbols (symbols.h), in the
// kallsyms form trace.dat carries, so `trace` and `trace-cmd report` print
// the same names. Reloaded when an address falls outside every known object
// (a library loaded since) or after invalidate().
// Context: reader side; allocates, takes a mutex.
#pragma once

#include <cstdint>
#include <string>

namespace usrtrace::symbols {

class Resolver {
 public:
  // "name", "name+0xOFF/0xSIZE" with `offset`, or "0xADDR" if unknown.
  static std::string name(uint64_t addr, bool offset);
  // The function that holds `addr`: its name (kallsyms form) and `addr`'s
  // offset into it. false when no symbol covers it.
  static bool lookup(uint64_t addr, std::string* name, uint64_t* offset);
  static void invalidate();
};

}  // namespace usrtrace::symbols
