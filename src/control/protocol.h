// The control socket's wire format: what a client (the usrtrace command, the
// FUSE mount, usrtrace::control::Client) and a traced process's server say.
//
// Every message is a 4-byte little-endian body length, then the body. A
// client sends one request and reads its response before the next one (a
// connection is a sequence of exchanges; parallel clients open several).
//
//   request body:   u8 op, then the op's fields
//   response body:  i32 status (>= 0, or -errno), u32 flags, then payload
//
//   op        fields                                  payload of a success
//   kHello    -                                       u32 pid, str comm, str version
//   kStat     str path                                u8 is_dir, u32 mode
//   kList     str path                                u32 n, n x str name
//   kOpen     str path, u32 flags (O_*)               u32 handle
//   kRead     u32 handle, u32 size, u32 wait_ms       the bytes (status: their count)
//   kWrite    u32 handle, str data                    - (status: bytes taken)
//   kClose    u32 handle                              -
//   kMkdir    str path                                -
//   kRmdir    str path                                -
//   kPages    str instance, u32 max_bytes,            u32 page_size, u32 nr_cpus,
//             u32 wait_ms, u8 flush                   then (u32 cpu, page_size bytes)...
//   kMeta     u32 n, n x str instance                 the metadata (control/meta.h)
//   kRecord   u8 on                                   -
//   kShare    str instance                            u32 fd: the instance's
//                                                     buffer in shared memory,
//                                                     open in the process as
//                                                     this descriptor (for
//                                                     /proc/PID/fd/N); ENOTSUP
//                                                     when it is not there
//
// str is a u32 length and that many bytes (no NUL). Integers are
// little-endian. A read that finds nothing (trace_pipe, trace_pipe_raw, or
// kPages without full pages) waits up to wait_ms (at most kMaxWaitMs) on the
// server, not in it: the server parks the request and answers it when data
// comes or time is up, serving other clients meanwhile. Flags in a
// response: kExiting once the process is exiting (see server.h: a
// recording client then takes what is left and releases the process).
//
// A connection the server refuses gets one response before the close,
// whatever it sent: -EACCES (another user's client), or -EUSERS with the
// payload u32 max_clients, u32 idle_ms (the server serves its limit of
// clients; one that sends nothing for idle_ms, 0: never, is closed).
//
// Every request is untrusted input: sizes are bounded (kMaxRequest, paths
// kMaxPath, reads and pages kMaxData) and a request that does not decode
// exactly, with no bytes left over, is refused with EPROTO and the
// connection closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace usrtrace::control {

enum class Op : uint8_t {
  kHello = 1,
  kStat = 2,
  kList = 3,
  kOpen = 4,
  kRead = 5,
  kWrite = 6,
  kClose = 7,
  kMkdir = 8,
  kRmdir = 9,
  kPages = 10,
  kMeta = 11,
  kRecord = 12,
  kShare = 13,
};

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxData = 1u << 20;  // a read, a write, a kPages answer
inline constexpr size_t kMaxPath = 4096;
inline constexpr size_t kMaxRequest = kMaxData + 64 * 1024;
inline constexpr size_t kMaxResponse = 256u << 20;  // kMeta of a big program (kallsyms)
inline constexpr uint32_t kMaxWaitMs = 10000;
inline constexpr uint32_t kMaxInstancesPerMeta = 256;
inline constexpr int kMaxCpus = 4096;  // what a process may say it has (kPages, kMeta)

inline constexpr uint32_t kExiting = 1u << 0;  // response flag
// Response flag: the process's metadata (events, loaded objects) changed
// since this connection last took it with kMeta (or it never did).
inline constexpr uint32_t kMetaChanged = 1u << 1;

struct Request {
  Op op = Op::kHello;
  std::string path;                // kStat, kList, kOpen, kMkdir, kRmdir; kPages, kShare: the instance
  std::string data;                // kWrite
  std::vector<std::string> names;  // kMeta
  uint32_t flags = 0;              // kOpen
  uint32_t handle = 0;             // kRead, kWrite, kClose
  uint32_t size = 0;               // kRead; kPages: max_bytes
  uint32_t wait_ms = 0;            // kRead, kPages
  bool on = false;                 // kRecord; kPages: flush
};

// Appends a whole request message (length prefix included) to *out.
void encode_request(const Request& r, std::string* out);

// Decodes one request body (without its length prefix). 0, or -EPROTO when
// the body is not exactly one well-formed request within the bounds.
int decode_request(const uint8_t* body, size_t len, Request* out);

// Little-endian building and bounded parsing of message bodies.
class Encoder {
 public:
  explicit Encoder(std::string* out) : out_(out) {}
  void u8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(std::string_view s);
  void raw(std::string_view s) { out_->append(s); }

 private:
  std::string* out_;
};

class Decoder {
 public:
  Decoder(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int32_t i32() { return static_cast<int32_t>(u32()); }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  // A string of at most `max` bytes; a longer one fails the decoder.
  std::string str(size_t max);
  // The next n bytes, or nullptr (and failure) if there are fewer.
  const uint8_t* bytes(size_t n);
  bool ok() const { return ok_; }
  bool done() const { return ok_ && n_ == 0; }
  size_t left() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
  bool ok_ = true;
};

// The length prefix of a message whose body is already in *msg from
// offset `at` (where 4 bytes were reserved).
void finish_message(std::string* msg, size_t at);

}  // namespace usrtrace::control
