// USDT/SDT probes (sys/sdt.h): the `.note.stapsdt` notes of the loaded
// objects, each a site (a nop the compiler left) with its argument
// locations, and an optional semaphore (a counter the program tests before
// preparing the arguments, which a tracer raises while it listens).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "probe/targets.h"

namespace usrtrace::probe {

struct SdtSite {
  std::string provider, name;
  std::string object;        // the object's path
  uint64_t addr = 0;         // run-time address of the site
  uint64_t file_offset = 0;  // the site's offset in the object's file (PATH:OFFSET)
  uint64_t semaphore = 0;    // run-time address of its semaphore (a u16), 0 if none
  std::string args;          // as the note says: "-4@%edi 8@-24(%rbp)"
};

// Every site of every loaded object. A site outside the object's code, or
// a semaphore outside its writable data, is not listed (the note is the
// file's word, not ours). Context: control plane; reads the
// objects' files (libelf).
std::vector<SdtSite> sdt_sites();
// Those of one loaded object.
std::vector<SdtSite> sdt_sites_in(const LoadedObject& o);
// Those in the notes of a file that is not loaded (a `PATH%PROVIDER:NAME`
// probe defined before dlopen: its fields come from them): addresses as
// linked (no bias), file offsets as they will be.
std::vector<SdtSite> sdt_file_sites(const std::string& path);

// The note's argument string as uprobe_events fetch args: "-4@%edi" is
// `%di:s32`, "8@-24(%rbp)" `-24(%bp):u64`, "4@$5" `\5:u32`; named
// arg1..argN unless `names` gives names; a name may carry a type
// ("path:string" reads the string the operand points at, "n:x32" shows it
// in hex). false with *why for an operand
// this cannot express (a scaled index, a high-byte register).
bool sdt_fetch_args(std::string_view note_args, const std::vector<std::string>& names, std::string* out,
                    std::string* why);

// available_sdt_probes: "PROVIDER:NAME PATH 0xADDR [semaphore 0xADDR] ARGS"
// per site.
std::string sdt_text();

}  // namespace usrtrace::probe
