// Private to src/function: the function tracers' control plane as its
// files share it. control.cc holds the configuration, the table of
// traceable functions and the site-table rebuild; commands.cc the function
// commands of set_ftrace_filter; profile.cc the function profiler. All of it
// under g_mu.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "function/control.h"
#include "function/core.h"
#include "instance/instance.h"

namespace usrtrace::function {

// A traceable function.
struct Func {
  uint64_t addr;
  std::string name;      // kallsyms form: demangled, no blanks
  std::string mangled;   // as in the symbol table
  std::string module;    // shared object's file name; the program's for the main executable
  uint64_t size = 0;     // from the symbol table
  bool plain = false;    // no compiler hook: traced through the patch engine (plain.cc)
  bool library = false;  // of a shared object, not the main program
};

// One write's glob, applied in order: add (or remove) what it matches.
struct Op {
  std::string glob;
  std::string module;  // ":mod:" glob, or empty
  bool remove = false;
};

struct SlotConfig {
  Tracer tracer = Tracer::kNop;
  std::vector<Op> lists[4];
  std::vector<int> pids[2];  // trace, notrace
  uint32_t max_depth = 0;
  uint64_t thresh_us = 0;
};

// A function command on one function of one instance.
struct ProbeEntry {
  std::unique_ptr<Probe> probe;  // what the hooks read (count included)
  uint64_t fn;
  std::string name;           // the function's kallsyms name, for listing
  std::string system, event;  // enable_/disable_event
  bool counted;               // listed with its count, else "unlimited"
};

// A parsed "GLOB:COMMAND[:ARGS]".
struct Command {
  Op op;  // the functions (op.remove: "!GLOB:COMMAND")
  ProbeKind kind;
  long count = -1;
  internal::EventDesc* target = nullptr;
  std::string system, event;
};

extern base::Mutex g_mu;
extern std::vector<ProbeEntry> g_probes USRTRACE_GUARDED_BY(g_mu);  // in the order added
// Removed probes that a hook may still read: freed after the next table's
// grace period (rebuild_locked).
extern std::vector<std::unique_ptr<Probe>> g_retired USRTRACE_GUARDED_BY(g_mu);
extern bool g_profiling USRTRACE_GUARDED_BY(g_mu);  // function_profile_enabled
extern SlotConfig g_config[instance::kMaxInstances] USRTRACE_GUARDED_BY(g_mu);

// ---- control.cc
// Every traceable function of the loaded objects, by address (built on
// first use, again after objects_changed()).
const std::vector<Func>& funcs_locked() USRTRACE_REQUIRES(g_mu);
// How many times funcs_locked() read the process's symbol tables (for tests).
uint64_t function_table_reads();
// Whether a list's glob (with its ":mod:") names `f`.
bool matches(const Op& op, const Func& f);
// Publishes the site table and patch set for the current configuration.
void rebuild_locked() USRTRACE_REQUIRES(g_mu);

// ---- plain.cc
// The objects whose functions are never plain sites: usrtrace's runtime, the
// objects it needs (transitively) and the dynamic loader; "" is the main
// program.
std::set<std::string> runtime_modules();
// Arms exactly the plain functions among `wanted` (sorted addresses) through
// the patch engine, in one batch; forgets the sites of unloaded objects.
void arm_plain_locked(const std::vector<Func>& funcs, const std::vector<uint64_t>& wanted)
    USRTRACE_REQUIRES(g_mu);
// "ADDR METHOD" per armed plain function, and "NAME [MODULE]\tWHY" per
// function the engine refused (or left on int3: "int3: WHY").
std::string plain_sites_locked() USRTRACE_REQUIRES(g_mu);
std::string plain_refused_locked() USRTRACE_REQUIRES(g_mu);
// The method of an armed plain function ("" if not armed).
const char* plain_method_locked(uint64_t fn) USRTRACE_REQUIRES(g_mu);

// ---- commands.cc
// The ':' that ends a token's function glob, skipping C++'s "::".
size_t command_colon(const std::string& tok);
// Parses COMMAND[:ARGS] (`rest`, at byte `pos` of the write) into *c.
int parse_command(const std::string& rest, size_t pos, Command* c, Error* err);
// Adds (or, with op.remove, removes) the command's probes on the matching
// functions. A probe added again gets the new count.
void apply_command_locked(int slot, const Command& c, const std::vector<Func>& funcs) USRTRACE_REQUIRES(g_mu);
// Drops the probes of `slot` (all: -1) or those that name `target`, with no
// soft-mode bookkeeping (the slot or the event is going away). The caller
// rebuilds the table. True if any went.
bool drop_probes_locked(int slot, const internal::EventDesc* target) USRTRACE_REQUIRES(g_mu);
// The commands of `slot`, as set_ftrace_filter lists them after the filter.
std::string probe_lines_locked(int slot) USRTRACE_REQUIRES(g_mu);

// ---- profile.cc
// A new (empty) profile for the current functions, published; the old one
// is freed after a grace period (frames of the old generation are ignored).
void new_profile_locked() USRTRACE_REQUIRES(g_mu);

}  // namespace usrtrace::function
