// Where a probe goes: a uprobe_events target (PATH:OFFSET, PATH:SYMBOL[+OFFS]
// or SYMBOL[+OFFS]) resolved to an address in this process, with the
// enclosing function's bounds (the patch engine looks for jump targets in
// them) and the object's load bias (@+FILEOFFS reads).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace usrtrace::probe {

struct Target {
  std::string path;     // "" for the SYMBOL form (any object)
  std::string symbol;   // "" for PATH:OFFSET
  uint64_t offset = 0;  // a file offset (PATH:OFFSET), or from the symbol
};

struct Resolved {
  uint64_t addr = 0;
  uint64_t fn_start = 0, fn_size = 0;  // 0 when no symbol covers addr
  uint64_t bias = 0;                   // the object's dlpi_addr
  std::string object;                  // its path, as loaded ("" never: the main program's real path)
  std::string function;                // the symbol holding addr, "" if none
};

// The kernel's answers where it has one: -ENOENT (no such file, symbol or
// object loaded: `*pending` is set when PATH names a file that exists but is
// not loaded yet, for dlopen), -EINVAL (an offset outside the object's
// code), -EEXIST... with a one-line *why.
// Context: control plane; reads the symbol tables (libelf), allocates.
int resolve(const Target& t, Resolved* out, bool* pending, std::string* why);

// A loaded object: its path (the program's real path for the program), its
// real path, its load bias and PT_LOAD headers.
struct LoadedObject {
  std::string path, real;
  uint64_t bias = 0;
  struct Load {
    uint64_t offset, vaddr, filesz, memsz;
    bool exec, write;
  };
  std::vector<Load> loads;
};
// The program first. Context: control plane.
std::vector<LoadedObject> loaded_objects();

// The run-time address of a u16 at `file_offset` of the loaded `object`,
// in its writable data (a uprobe's REF_CTR_OFFSET, a USDT semaphore); 0 if
// it is not there or not aligned. Context: control plane.
uint64_t data_address(const std::string& object, uint64_t file_offset);

// The loaded objects whose real path is `path`'s (dl_iterate_phdr), for
// dlopen's pending probes. Context: control plane.
bool is_loaded(const std::string& path);

}  // namespace usrtrace::probe
