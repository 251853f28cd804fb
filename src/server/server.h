// The control server: a traced process serves its tree of control files
// (src/tracefs) on a Unix socket, so that the usrtrace command, the FUSE
// mount and any client of usrtrace/control.h drive it from outside.
//
// One thread, named usrtrace-ctl, at nice 19, every signal blocked, runs a
// poll() loop over the listening socket and up to kMaxClients connections.
// It never blocks on a client: sockets are non-blocking, each connection has
// at most one request in work and one response being sent, and files are
// opened O_NONBLOCK. A read that finds nothing and may wait (wait_ms) is
// parked and tried again every kTickMs, or at once when the process exits.
// The write path never waits for the server: it only reads the buffers as
// any reader does.
//
// Connections are few (kMaxClients) and a client that went quiet (stopped
// with Ctrl-Z, hung, leaking connections) must not hold a place for good:
// one that sends nothing for kIdleMs (USRTRACE_CONTROL_IDLE_MS; 0: never)
// is closed. A parked request is not idle time: its client waits for us.
// A client refused at the limit is told so (EUSERS, with the limit and the
// idle time), at once.
//
// Trust: the socket's directory must be this user's, mode 0700 (paths.h;
// clients check it too, and the listener's SO_PEERCRED), and only this
// user or root may connect (SO_PEERCRED). A server that cannot start says
// why on stderr, once per process ("usrtrace: control socket not started:
// /tmp/usrtrace-1000 is owned by uid 65534, not by uid 1000").
//
// Lifetime: started when the library loads (USRTRACE_CONTROL=0 in the
// environment prevents it; usrtrace_control_start()/stop() in the C API);
// the socket is removed at exit. At exit, connections that declared
// themselves recorders (kRecord) get kExiting and the exit waits until they
// release the process or USRTRACE_EXIT_WAIT_MS (default 5000) pass, so that
// a recorder takes the last pages. A forked child does not serve (it has
// no server thread) and never removes its parent's socket.
//
// Files: server.cc (the thread: poll loop, connections, dispatch),
// recorder_service.h (kPages, kMeta, kRecord), exit_handshake.h (the exit
// and deferred signals waiting for recorders), lifecycle.cc (start, stop,
// autostart; server_impl.h is the object it shares with server.cc).
#pragma once

#include <string>

namespace usrtrace::control {

inline constexpr int kMaxClients = 16;
inline constexpr int kMaxFilesPerClient = 64;
inline constexpr int kTickMs = 10;
inline constexpr int kIdleMs = 30000;

// Starts serving (idempotent). 0, or -errno with *err set; with err null
// the reason goes to stderr instead (once per process). Context: control
// plane; creates a thread.
int start_server(std::string* err);
// Stops serving and removes the socket. Context: control plane.
void stop_server();
// The socket's path while serving, else "".
std::string server_socket();

}  // namespace usrtrace::control
