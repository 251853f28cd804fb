// Dump on crash: what ftrace_dump_on_oops does for the kernel, for a process.
//
// On SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT the handler writes an oops
// header line (signal, address, thread), the trace buffers as the kernel's
// ftrace_dump() prints them and a backtrace of the faulting thread (last:
// the unwinder is the one part that may take a lock), to stderr or to the
// file set with set_file(); then the signal takes its usual course.
//
//   enable (control plane)               the handler (the crashing thread)
//   ----------------------               ---------------------------------
//   allocate the dump's storage:         [1] first crash of the process? else
//     page copies (DumpIterator),            wait for the one dumping (bounded)
//     a line buffer, the held event,         or, if it is this thread that
//     an alternate signal stack              faulted again inside the dump,
//   call backtrace() once (loads             give up and die by the first signal
//     libgcc_s: dlopen allocates)        [2] stop recording (the kernel's
//   calibrate the TSC clock                  tracing_off()), write the header,
//   sigaction(SA_SIGINFO|SA_ONSTACK),        buffers, backtrace: no lock, no
//     keeping the previous actions           allocation, write(2) only
//                                        [3] restore the previous action; a
//                                            fault (si_code > 0) returns and
//                                            faults again under it, a sent
//                                            signal is passed to the previous
//                                            handler, or raised again for
//                                            SIG_DFL
//
// Only the first fatal signal of the process dumps, as the kernel dumps
// once; after it the previous actions are back in place. set_mode(kOff)
// also puts them back. The storage stays allocated (a handler may be
// running on another thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace usrtrace::crash {

// ftrace_dump_on_oops's values (the kernel's DUMP_NONE, DUMP_ALL, DUMP_ORIG
// and "all" instances).
enum class DumpMode : uint8_t {
  kOff,      // "0"
  kTop,      // "1": the top instance, every CPU
  kOrigCpu,  // "2": the top instance, the CPU the signal arrived on
  kAll,      // "all": every instance, every CPU
};

// Parses "0", "1", "2" or "all", with one optional trailing newline. On
// failure returns false and sets *bad to the offset of the first bad byte.
bool parse_mode(std::string_view s, DumpMode* mode, size_t* bad);
const char* mode_name(DumpMode mode);

// Sets the mode: installs the handlers (allocating the dump's storage
// first) or restores the previous actions. Returns 0 or -ENOMEM.
// Context: any thread but not a signal handler; allocates, takes a lock.
int set_mode(DumpMode mode);
DumpMode mode();

// ftrace_dump_on_oops_file: the file the dump is written to, opened (and
// created, 0600) now with O_APPEND so that the handler only write()s; ""
// is stderr. base::open_for_write's rules: a regular file or a character
// device (a terminal, /dev/null), not a FIFO; another user's symlink is not
// followed. Every file set shares one descriptor. Returns 0 or -errno
// (-EINVAL for a NUL byte, a path over PATH_MAX, or a FIFO, a socket, ...),
// with the reason in *why. Context: as set_mode().
int set_file(std::string_view path, std::string* why = nullptr);
std::string file();

// USRTRACE_DUMP_ON_CRASH: "MODE" or "MODE:PATH" (MODE as parse_mode()).
// Returns 0 or -EINVAL (bad mode) or set_file()'s error; `*bad` gets the
// offset of the bad byte. Context: as set_mode().
int configure(std::string_view value, size_t* bad);

// Allocates the dump's storage if it is not there yet. Returns 0 or
// -ENOMEM. Context: as set_mode().
int prepare();

// Writes the dump (header line, buffers) for `mode` (kOff: kTop) to `fd`,
// without the oops header and without stopping tracing. Returns 0, -EAGAIN
// when another dump is running, -ENOMEM when prepare() was never called
// (set_mode() calls it), or -errno from write(2).
// Context: any thread, signal handlers included; async-signal-safe once
// prepared: no lock, no allocation.
int dump(int fd, DumpMode mode);

}  // namespace usrtrace::crash
