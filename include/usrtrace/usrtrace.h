/*
 * usrtrace's C API: the kernel's trace_array_* calls for a program's own
 * trace instances, and path-based access to the control files.
 *
 *   struct usrtrace_array *tr = usrtrace_array_get_by_name("myapp");
 *   usrtrace_array_set_clr_event(tr, "myapp", "*", true);
 *   usrtrace_array_printk(tr, "request %d done\n", id);
 *   ...
 *   usrtrace_array_put(tr);
 *   usrtrace_array_destroy(tr);     // rmdir instances/myapp, if wanted
 *
 * Instances are the directories under instances/ (the top instance is the
 * tree's root); a struct usrtrace_array is a counted reference to one. While
 * any reference is held the instance cannot be removed: rmdir fails with
 * EBUSY, as the kernel's does for a trace_array a module holds.
 *
 * Errors are negative errno values (the kernel's errno for the same
 * mistake); calls returning a pointer return NULL and set errno.
 *
 * Context of every call here, unless noted: any thread but not a signal
 * handler; may allocate and take locks. The C++ API is usrtrace/usrtrace.hpp.
 */
#ifndef USRTRACE_USRTRACE_H_
#define USRTRACE_USRTRACE_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#ifndef USRTRACE_EXPORT
#define USRTRACE_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A reference to an instance (the kernel's struct trace_array). Opaque. */
struct usrtrace_array;

/*
 * Returns a new reference to the instance NAME, creating the instance if
 * it does not exist (the kernel's trace_array_get_by_name() since 5.7).
 * NULL or "" is the top instance, which always exists. Release the
 * reference with usrtrace_array_put().
 * Errors (NULL, errno set): EINVAL (a bad name: empty, ".", "..", "/" or
 * characters other than [A-Za-z0-9._-], over 64 bytes), ENOSPC (64
 * instances exist), ENOMEM, ENOSYS (the kernel lacks rseq).
 */
USRTRACE_EXPORT struct usrtrace_array *usrtrace_array_get_by_name(const char *name);

/*
 * Creates instance NAME (as mkdir instances/NAME does) and returns a
 * reference to it. Errors (NULL, errno set): EEXIST if it exists, and those
 * of usrtrace_array_get_by_name().
 */
USRTRACE_EXPORT struct usrtrace_array *usrtrace_array_create(const char *name);

/*
 * Returns a reference to instance NAME if it exists, without creating it
 * (the kernel's trace_array_get_by_name() before 5.7). NULL or "" is the
 * top instance. Errors (NULL, errno set): ENOENT, EINVAL (a bad name).
 */
USRTRACE_EXPORT struct usrtrace_array *usrtrace_array_lookup(const char *name);

/* Takes another reference (trace_array_get()). Returns TR. */
USRTRACE_EXPORT struct usrtrace_array *usrtrace_array_get(struct usrtrace_array *tr);

/*
 * Drops a reference (trace_array_put()); TR must not be used after. NULL
 * is ignored.
 */
USRTRACE_EXPORT void usrtrace_array_put(struct usrtrace_array *tr);

/*
 * Removes the instance TR refers to, with its buffer and settings
 * (trace_array_destroy()). As in the kernel, drop your reference first:
 *
 *   usrtrace_array_put(tr);
 *   usrtrace_array_destroy(tr);   // TR is only compared, never read
 *
 * Returns 0 (TR must not be used after), -EBUSY while any reference is
 * held or a control file of the instance is open (nothing changes),
 * -ENODEV (already removed), -EINVAL (NULL or the top instance).
 */
USRTRACE_EXPORT int usrtrace_array_destroy(struct usrtrace_array *tr);

/*
 * The instance's name ("" for the top instance), valid while TR is held.
 */
USRTRACE_EXPORT const char *usrtrace_array_name(const struct usrtrace_array *tr);

/*
 * printf-style text into TR's buffer as an ftrace:print event, shown as
 * "calling_function: text" (trace_array_printk(), whose ip argument is
 * here the call's return address: a tail call shows the caller's caller).
 * Unlike the kernel, the top instance takes printk too: it is the
 * program's own. A newline is added if the text lacks one; text past 2030
 * bytes is cut. Returns the bytes of text recorded, 0 when the
 * trace_printk option is off, -ENOENT for a NULL TR, -EINVAL for a NULL
 * FMT. Context: any thread, not a signal handler (vsnprintf); no lock.
 */
USRTRACE_EXPORT int usrtrace_array_printk(struct usrtrace_array *tr, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* usrtrace_array_printk() with a va_list. */
USRTRACE_EXPORT int usrtrace_array_vprintk(struct usrtrace_array *tr, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/*
 * Enables (ENABLE true) or disables the events of TR whose system and name
 * match SYSTEM and EVENT (trace_array_set_clr_event()). NULL or "" matches
 * any system or any event; unlike the kernel's, both are globs ("sched",
 * "sched_*", "*"). Returns 0 as the kernel does, -EINVAL when nothing
 * matched, -ENOENT for a NULL TR, or the -errno of a dynamic probe whose
 * site could not be armed (that event stays disabled, as the kernel's).
 */
USRTRACE_EXPORT int usrtrace_array_set_clr_event(struct usrtrace_array *tr, const char *system,
                                                 const char *event, bool enable);

/*
 * Starts and stops recording into TR's buffer (tracing_on in TR's
 * directory; the kernel's tracer_tracing_on()/off()). NULL is the top
 * instance.
 */
USRTRACE_EXPORT void usrtrace_tracing_on(struct usrtrace_array *tr);
USRTRACE_EXPORT void usrtrace_tracing_off(struct usrtrace_array *tr);
/* Whether TR records (tracer_tracing_is_on()). NULL is the top instance. */
USRTRACE_EXPORT bool usrtrace_tracing_is_on(struct usrtrace_array *tr);

/*
 * Snapshots (the kernel's tracing_alloc_snapshot_instance() and
 * tracing_snapshot_instance()). usrtrace_snapshot_alloc() allocates TR's
 * spare buffer(s), sized like its buffer (as `echo 1 > snapshot_enabled`);
 * 0 or -ENOMEM (-ENOENT for no instance). Context: not a signal handler.
 *
 * usrtrace_snapshot() swaps TR's buffer with the next spare in O(1): the
 * events before the call are kept in the snapshot (`cat snapshot`) while
 * recording goes on in emptied pages, and no event written meanwhile is
 * lost. REASON (may be NULL; up to 127 bytes are kept) shows at the
 * snapshot's head. With snapshot_ring_size N, the last N snapshots are kept
 * (snapshot, snapshot.1, ...). Returns 0; -ENOENT when no spare is
 * allocated, and then, as the kernel does, two marker lines say so in the
 * trace and recording stops, so the events before the error stay there.
 * NULL is the top instance.
 * Context: any thread, signal handlers included; lock-free, no allocation,
 * no system call (once the instance exists).
 */
USRTRACE_EXPORT int usrtrace_snapshot_alloc(struct usrtrace_array *tr);
USRTRACE_EXPORT int usrtrace_snapshot(struct usrtrace_array *tr, const char *reason);

/*
 * Control files. PATH is relative to the tree's root, as the kernel's are
 * to /sys/kernel/tracing: "trace", "set_event",
 * "instances/myapp/tracing_on", "events/sched/enable".
 */

/*
 * Reads PATH from its start into BUF, like open + read(2) until BUF is full
 * or the file ends + close; no NUL is added. trace_pipe does not wait for
 * data, and consumes what the open file took from the buffer: text that
 * did not fit in BUF is lost, as when a reader closes the kernel's
 * trace_pipe mid-read, so give it room (a file handle API that streams
 * is not there yet). Returns the bytes read or -errno (-ENOENT, -EISDIR,
 * -EACCES for a write-only file).
 */
USRTRACE_EXPORT long usrtrace_tracefs_read(const char *path, char *buf, size_t size);

/*
 * Writes SIZE bytes of TEXT to PATH as `echo -n TEXT > PATH` does (the file
 * is truncated first: writing set_event clears it, as in the kernel).
 * Returns the bytes taken or -errno; a refused write adds a line to the
 * instance's error_log where the kernel's would.
 */
USRTRACE_EXPORT long usrtrace_tracefs_write(const char *path, const char *text, size_t size);

/* As usrtrace_tracefs_write(), appending: `echo -n TEXT >> PATH`. */
USRTRACE_EXPORT long usrtrace_tracefs_append(const char *path, const char *text, size_t size);

/*
 * mkdir/rmdir under the tree; only instances/NAME can be made or removed.
 * Return 0 or -errno (-EEXIST, -ENOENT, -EINVAL for a bad name, -EBUSY
 * while a reference or an open control file holds the instance, -EPERM
 * anywhere but instances/, as the kernel's tracefs).
 */
USRTRACE_EXPORT int usrtrace_tracefs_mkdir(const char *path);
USRTRACE_EXPORT int usrtrace_tracefs_rmdir(const char *path);

/*
 * Dump on crash (the kernel's ftrace_dump_on_oops). On SIGSEGV, SIGBUS,
 * SIGILL, SIGFPE or SIGABRT, a handler writes the signal, the faulting
 * thread's backtrace and the trace buffers (as the kernel's ftrace_dump()
 * prints them) to stderr or to a file, then lets the signal kill the
 * process as it would have (core dump and exit status unchanged; a handler
 * installed before is called). Only the first fatal signal dumps.
 *
 * MODE: "0" off, "1" the top instance, "2" the top instance's CPU the
 * signal arrived on, "all" every instance. PATH: a file to append the dump
 * to (created 0644), opened now; NULL keeps the current one, "" is stderr.
 * The same as writing the ftrace_dump_on_oops and ftrace_dump_on_oops_file
 * control files; USRTRACE_DUMP_ON_CRASH=MODE[:PATH] in the environment does
 * it when the library loads. Returns 0 or -errno: -EINVAL (bad MODE),
 * -ENOMEM, or open(2)'s error for PATH.
 */
USRTRACE_EXPORT int usrtrace_dump_on_crash(const char *mode, const char *path);

/*
 * Writes the buffers as the crash dump does (MODE as set by
 * usrtrace_dump_on_crash(), the top instance when that is "0") to FD, on
 * demand; tracing goes on. Returns 0 or -errno: -EAGAIN while another dump
 * runs, write(2)'s error.
 * Context: any thread; async-signal-safe (for a program's own fatal-signal
 * handler: no lock, no allocation) once usrtrace_dump_on_crash() was called
 * with any MODE ("0" included) or usrtrace_dump() ran once outside a
 * signal handler (the first call allocates the dump's storage).
 */
USRTRACE_EXPORT int usrtrace_dump(int fd);

/*
 * The control socket (usrtrace/control.h, the usrtrace command, the FUSE
 * mount): the process serves its control files on a Unix socket from the
 * moment the library loads, unless USRTRACE_CONTROL=0 is in the
 * environment. usrtrace_control_start() starts serving (if it was kept
 * off, or stopped); 0 or -errno (the socket's directory is not usable:
 * -EPERM when someone else owns it). usrtrace_control_stop() stops and
 * removes the socket. Context: not a signal handler; not from a forked
 * child before exec (it starts a thread).
 */
USRTRACE_EXPORT int usrtrace_control_start(void);
USRTRACE_EXPORT void usrtrace_control_stop(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* USRTRACE_USRTRACE_H_ */
