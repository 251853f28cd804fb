// Reads of memory that may not be there, for the dynamic probes' fetch
// programs (src/probe): `+8(%di)` dereferences whatever the program had in
// a register, so a read may fault. The kernel's answer (copy_from_user and
// its exception table), in user space:
//
//   safe_copy / safe_strncpy      hand-written assembly, all of it between
//   [start .................end)   two labels; a fault in it can only be a
//   fixup: mov $-EFAULT,%rax; ret load from the source (or a store to dst)
//
// Loops of movs, not rep movsb, whose start-up cost 60 ns a call on this
// VM's EPYC: a fetch reads 1 to 8 bytes at a time.
//
// A SIGSEGV or SIGBUS raised by the hardware (si_code > 0) whose rip lies
// in [start, end) resumes at the fixup, which returns -EFAULT to the caller
// as an ordinary return would (the routines are leaves that never touch the
// stack, so rsp is the caller's at every instruction). The good path is the
// copy itself: no system call, no lock, no sigsetjmp.
//
// The handler is installed by install_fault_fixup() (idempotent). Every
// fault that is not ours goes to the action that was there before, chained
// as function/patch_signals.cc chains SIGTRAP: its sa_sigaction or
// sa_handler, else the default action re-raised. A handler installed later
// than ours must try fixup_fault() first (crash/crash.cc does); one that
// does not would see our faults as crashes.
#pragma once
#include <signal.h>

#include <cstddef>
#include <cstdint>

namespace usrtrace::base {

// Copies n bytes from src, 8 at a time then the tail's bytes. Returns 0,
// or -EFAULT when some byte could not be read (dst then holds some of the
// bytes before the fault: the callers zero it, as copy_from_user() does).
// Context: any thread, signal handlers included; no lock, no system call.
int safe_copy(void* dst, const void* src, size_t n);

// Copies a NUL-terminated string of at most `max` bytes, its NUL included.
// Returns the bytes copied, NUL included; `max` (and no NUL in dst) when the
// string is longer; -EFAULT when a byte before its end could not be read.
// strncpy_from_user()'s contract, +1 for the NUL. Context: as safe_copy.
long safe_strncpy(char* dst, const char* src, size_t max);

// Installs the SIGSEGV/SIGBUS handler (SA_SIGINFO | SA_ONSTACK), keeping the
// previous actions for every fault that is not ours.
// Context: control plane; idempotent, thread-safe.
void install_fault_fixup();

// A hardware fault (si_code > 0) at an instruction of the copy routines:
// moves `ucontext`'s rip to their fixup and returns true; else false and
// nothing changed. For every SIGSEGV/SIGBUS handler of the process, before
// it treats the fault as its own. Context: a signal handler.
bool fixup_fault(int sig, const siginfo_t* info, void* ucontext);

// How many faults were fixed up (a statistic, for tests and uprobe_profile).
uint64_t fixed_faults();

}  // namespace usrtrace::base
