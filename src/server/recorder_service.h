// The recorder service: what the control server answers a recorder in
// another process (record/remote_recorder.cc: `usrtrace record -P PID`, and
// `usrtrace record -- COMMAND`), apart from the tracefs requests.
//
//   kPages   whole pages taken from an instance's ring buffer
//            (tracedat::take_page), the CPUs in turn so that none starves;
//            a connection holds a reader reference on each instance it
//            takes from, so the instance cannot be removed under it (EBUSY)
//   kMeta    what trace.dat needs besides the pages (tracedat::
//            collect_instance_meta); every later response says kMetaChanged
//            once what the metadata describes changed (an event registered
//            or removed, an object loaded or unloaded: base::
//            metadata_generation()), so the recorder asks again
//   kRecord  the connection declares itself a recorder: the process's end
//            then waits for it to take the last pages (exit_handshake.h)
//   kShare   where an instance's buffer in shared memory is (its memfd's
//            descriptor number), for a recorder that reads the pages
//            itself (record/shared_buffers.h); a reader reference as kPages
//
// The server (server.cc) decodes the request, sends the answer and parks a
// kPages that found nothing and may wait; this file makes the answer.
// Context: everything here runs on the server thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "control/protocol.h"
#include "server/exit_handshake.h"

namespace usrtrace::instance {
class Instance;
}

namespace usrtrace::control {

// What one connection holds of the service. Written by the server thread
// only.
struct RecorderSession {
  std::map<std::string, instance::Instance*> readers;  // kPages sources, each holding a reference
  uint32_t next_cpu = 0;                               // where the next kPages answer starts
  bool recording = false;                              // kRecord on: counted in ExitHandshake's recorders
  uint32_t meta_generation = 0;                        // base::metadata_generation() at the last kMeta
  bool has_meta = false;

  RecorderSession() = default;
  RecorderSession(const RecorderSession&) = delete;
  RecorderSession& operator=(const RecorderSession&) = delete;
  ~RecorderSession() { release_readers(); }

  // Page readers and a recording are the client's state: a connection that
  // holds them is not closed for being quiet.
  bool holds_state() const { return !readers.empty() || recording; }
  // Gives back the reader references (the connection's close; idempotent).
  void release_readers();
};

// An answer: its status (>= 0, or -errno) and payload.
struct Reply {
  int32_t status = 0;
  std::string payload;
};

// kPages: as many whole pages as fit r.size. False, with *out untouched,
// when there were none, `may_park`, the request may wait (r.wait_ms, not a
// flush) and the process is not exiting: the caller parks it.
bool take_pages(RecorderSession& s, const Request& r, bool may_park, const ExitHandshake& exit, Reply* out);
// kShare: the descriptor of r.path's buffer store, when it is a memfd
// (persist::kSharedMemory); -ENOTSUP otherwise.
Reply share_buffer(RecorderSession& s, const Request& r);
// kMeta: the metadata of the instances r.names; remembers the generation
// it was taken at (meta_flags()).
Reply collect_meta(RecorderSession& s, const Request& r);
// kMetaChanged when the metadata changed since `s` last took it (or it
// never did), else 0. Goes into every response's flags.
uint32_t meta_flags(const RecorderSession& s);
// kRecord on or off (and off when the connection goes).
void set_recording(RecorderSession& s, bool on, ExitHandshake* exit);

}  // namespace usrtrace::control
