// The program's own symbols: every function and object of the main
// executable and of each loaded shared object, at its run-time address,
// read from the ELF symbol tables with elfutils' libelf. They are
// usrtrace's kallsyms: trace.dat files carry them so that pointer and
// function fields (%ps, .sym) print as names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace usrtrace::symbols {

struct Symbol {
  uint64_t addr = 0;  // run-time address
  uint64_t size = 0;
  char type = 't';     // nm's letter: T/t function, D/d object (upper case: global)
  std::string name;    // as in the symbol table (mangled for C++)
  std::string module;  // shared object's file name; "" for the main executable
  // The object refers to __cyg_profile_func_enter: some of its code may be
  // built with -finstrument-functions (which functions: their prologue calls
  // it, see function/control.cc).
  bool instrumented = false;
  // Where the object's GOT holds that hook's address (0: none), the target
  // of its PLT stub or of a -fno-plt call.
  uint64_t hook_got = 0;
  // Named by its address ("OBJECT+0xSTART", from the unwind table): a
  // function to trace, but no name for a stack frame, which reads better
  // as the kernel prints an unnamed one ("OBJECT[+0xOFFSET]", resolver.cc).
  bool unnamed = false;
};

// Reads the symbols of every object loaded now (dl_iterate_phdr), .symtab
// where present, else the .symtab of its separate debug file (by build-id
// or .gnu_debuglink, under USRTRACE_DEBUG_FILE_DIRECTORY, default
// /usr/lib/debug, as gdb looks), else .dynsym and, for the functions of
// .text it does not name, the unwind table's (.eh_frame_hdr's FDEs, named
// "OBJECT+0xSTART"; an FDE that sets the frame at its first byte, a cold
// part of a function, is left out). Sorted by address, duplicates dropped.
// Context: control plane; allocates, opens files.
std::vector<Symbol> load_process_symbols();
// The same, read again only when an object was loaded or unloaded since
// (the loader's dlpi_adds/dlpi_subs) or the debug file directory changed:
// defining a thousand probes reads the symbol tables once, not a thousand
// times (40 ms each with libpython loaded). Context: control plane; takes a
// lock of its own around the read.
std::shared_ptr<const std::vector<Symbol>> process_symbols();

// The functions an object's unwind table knows: (link-time start, size) of
// every FDE that starts in .text ([text_addr, +text_size)) at a function's
// entry, from the bytes of .eh_frame_hdr and .eh_frame and their link-time
// addresses. The bytes are a file's: hostile, read with bounds (its fuzz
// target: fuzz/unwind_fuzzer.cc). Context: any.
struct Bytes {
  const uint8_t* data;
  size_t size;
  uint64_t addr;
};
struct UnwindFunction {
  uint64_t start;
  uint64_t size;
};
std::vector<UnwindFunction> unwind_table_functions(const Bytes& eh_frame_hdr, const Bytes& eh_frame,
                                                   uint64_t text_addr, uint64_t text_size);

// C++ names demangled ("ns::f(int, char)"); other names as they are.
std::string demangle(const std::string& name);

// A name usable in kallsyms, whose readers cut a line at the first blank:
// the demangled name with the blanks after commas dropped and the others
// turned into '_' ("f(int,unsigned_long)").
std::string kallsyms_name(const std::string& name);

// /proc/kallsyms text: "ADDR TYPE NAME[\t[MODULE]]\n" per symbol.
std::string kallsyms_text(const std::vector<Symbol>& syms);

}  // namespace usrtrace::symbols
