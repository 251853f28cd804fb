// x86-64 system call names by number, for the .syscall key modifier; the
// table is generated at configure time from <asm/unistd_64.h>.
#pragma once

#include <cstdint>

namespace usrtrace::hist {

// nullptr for a number the table does not know.
const char* syscall_name(uint64_t nr);

}  // namespace usrtrace::hist
