// The control socket (src/control), from a hostile client's side. Two
// layers run on every input:
//
//   1. decode_request() on the input as one message body. It must not
//      read outside the body (ASan), and a body it accepts must encode
//      back to the same bytes: the decoder takes nothing the encoder
//      cannot say, so a request has one spelling.
//   2. The live server, started once in this process. The input is a byte
//      stream of messages (u32 length, body) sent on one raw connection.
//      The fuzzer splits the stream as the server will, to know which
//      answers to expect, and checks each answer's shape against its
//      request (protocol.h's table), all within kIdleMs; a message that
//      does not decode must get -EPROTO (-EMSGSIZE over the bound) and
//      then a close. Then a fresh connection must get a correct kHello
//      and kStat of "trace": the server goes on serving.
//
// Some requests are tamed before they go out (re-encoded; layer 1 shows
// the bytes are otherwise the same): waits are cut to kWaitMs so that an
// input stays fast, and a few files are opened read-only whatever the
// input asks: buffer_file and ftrace_dump_on_oops_file would create files
// named by the input outside the control tree, buffer_size_kb and
// snapshot_ring_size would grow memory without bound, ftrace_dump_on_oops
// would replace libFuzzer's crash handlers. kMeta always names a missing
// instance (see tame()). Instances the input makes are removed after it,
// so the 63 slots are never used up.
//
// A custom mutator re-frames half of the mutants (each length prefix set
// to what its body parses as), so that streams of several well-formed
// requests are common; control.dict holds whole messages (open
// trace_pipe, read handle 1, ...) to be spliced together.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "control/meta.h"
#include "control/protocol.h"
#include "instance/instance.h"
#include "server/server.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(ctlfuzz, evt, (int32_t, n), "n=%d", REC->n)

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

namespace control = usrtrace::control;
namespace tracefs = usrtrace::tracefs;
using control::Decoder;
using control::Op;
using control::Request;
using usrtrace::instance::Instance;

constexpr uint32_t kWaitMs = 15;  // a parked read or kPages waits at most this
// No byte from the server for this long while it owes answers: it stalls
// (nothing it is asked here takes that long; kMeta is tamed).
constexpr int kIdleMs = 5000;
constexpr int kHealthMs = 10000;  // the health check's answer; longer means hung

// Opened read-only whatever the input asks (see the top of the file).
constexpr std::string_view kReadOnly[] = {"buffer_file", "ftrace_dump_on_oops", "buffer_size_kb",
                                          "snapshot_ring_size"};

[[noreturn]] void fail(const char* what) {
  fprintf(stderr, "control_request_fuzzer: %s\n", what);
  abort();
}

void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// Layer 1: decode, and what decodes encodes back to the same message.
bool decode_round_trip(const uint8_t* body, size_t len, Request* r) {
  if (control::decode_request(body, len, r) != 0) return false;
  std::string again;
  control::encode_request(*r, &again);
  check(again.size() == len + 4 && le32(reinterpret_cast<const uint8_t*>(again.data())) == len &&
            std::memcmp(again.data() + 4, body, len) == 0,
        "a decoded request does not encode back to its bytes");
  return true;
}

// True when the request was changed (see the top of the file).
bool tame(Request* r) {
  bool changed = false;
  if ((r->op == Op::kRead || r->op == Op::kPages) && r->wait_ms > kWaitMs) {
    r->wait_ms = kWaitMs;
    changed = true;
  }
  if (r->op == Op::kOpen && (r->flags & (O_ACCMODE | O_TRUNC)) != O_RDONLY) {
    for (std::string_view s : kReadOnly) {
      if (r->path.find(s) == std::string::npos) continue;
      r->flags &= ~static_cast<uint32_t>(O_ACCMODE | O_TRUNC);
      changed = true;
      break;
    }
  }
  if (r->op == Op::kMeta) {
    // One missing name makes the answer -ENOENT after the other names were
    // looked up, before collect_metadata(): the program's symbol tables
    // take ~0.4 s to read in this binary, every time.
    if (r->names.size() == control::kMaxInstancesPerMeta) r->names.pop_back();
    r->names.push_back("ctlfuzz/none");  // no instance has a / in its name
    changed = true;
  }
  return changed;
}

// One answer the input's stream must get: to `req`, or (refused != 0) the
// refusal of a bad message, after which the server closes.
struct Expect {
  Request req;
  int refused = 0;
};

// Splits the input as the server will, into the stream to send and the
// answers it must get. A message the server cannot take ends the
// expectations; its bytes and the rest still go out as they are.
void plan(const uint8_t* data, size_t size, std::string* out, std::vector<Expect>* expect) {
  size_t at = 0;
  while (size - at >= 4) {
    const uint32_t len = le32(data + at);
    if (len > control::kMaxRequest) {
      expect->push_back({Request{}, EMSGSIZE});
      break;
    }
    if (size - at - 4 < len) break;  // cut short: no answer, the server waits for the rest
    Request r;
    if (!decode_round_trip(data + at + 4, len, &r)) {
      expect->push_back({Request{}, EPROTO});
      break;
    }
    if (tame(&r))
      control::encode_request(r, out);
    else
      out->append(reinterpret_cast<const char*>(data + at), 4 + len);
    expect->push_back({std::move(r), 0});
    at += 4 + len;
  }
  out->append(reinterpret_cast<const char*>(data + at), size - at);
}

struct Answer {
  int32_t status = 0;
  uint32_t flags = 0;
  std::string payload;
};

// The answer's shape, for the request it answers.
void check_answer(const Expect& e, const Answer& a) {
  // kMetaChanged comes and goes with the process's events and objects (and
  // this connection's last kMeta); kExiting never, nor any unknown flag.
  check((a.flags & ~control::kMetaChanged) == 0,
        "an answer has flags other than kMetaChanged while the process is not exiting");
  check(a.status >= -4095, "an answer's status is neither a count nor -errno");
  if (e.refused) {
    check(a.status == -e.refused, "a bad message is not refused with EPROTO/EMSGSIZE");
    return;
  }
  const Request& r = e.req;
  const auto* p = reinterpret_cast<const uint8_t*>(a.payload.data());
  Decoder d(p, a.payload.size());
  if (a.status < 0) {
    check(a.payload.empty(), "an error answer has a payload");
    check(r.op != Op::kHello && r.op != Op::kRecord, "kHello or kRecord failed");
    return;
  }
  switch (r.op) {
    case Op::kHello:
      check(a.status == static_cast<int32_t>(control::kProtocolVersion), "kHello: wrong version");
      check(d.u32() == static_cast<uint32_t>(getpid()), "kHello: wrong pid");
      d.str(control::kMaxPath);
      d.str(control::kMaxPath);
      break;
    case Op::kStat:
      check(d.u8() <= 1 && (d.u32() & ~07777u) == 0, "kStat: bad is_dir or mode");
      break;
    case Op::kList: {
      const uint32_t n = d.u32();
      for (uint32_t i = 0; i < n && d.ok(); ++i) {
        const std::string name = d.str(control::kMaxPath);
        check(!name.empty() && name.find('/') == std::string::npos, "kList: a bad name");
      }
      break;
    }
    case Op::kOpen:
      check(d.u32() != 0, "kOpen: handle 0");
      break;
    case Op::kRead:
      check(static_cast<uint32_t>(a.status) <= r.size, "kRead: more than asked");
      d.bytes(static_cast<size_t>(a.status));
      break;
    case Op::kWrite:
      check(static_cast<size_t>(a.status) <= r.data.size(), "kWrite: took more than given");
      break;
    case Op::kClose:
    case Op::kMkdir:
    case Op::kRmdir:
    case Op::kRecord:
      check(a.status == 0, "a positive status where 0 or -errno is due");
      break;
    case Op::kPages: {
      check(a.payload.size() <= r.size, "kPages: more than max_bytes");
      const uint32_t ps = d.u32(), ncpu = d.u32();
      check(d.ok() && ps > 0 && ncpu > 0, "kPages: bad page size or CPU count");
      for (int32_t i = 0; i < a.status && d.ok(); ++i) {
        check(d.u32() < ncpu, "kPages: a page of a CPU that does not exist");
        d.bytes(ps);
      }
      break;
    }
    case Op::kShare:
      // The buffers here are in private memory (buffer_file is opened
      // read-only, so no input can put one in shared memory): never shared.
      check(false, "kShare: a buffer in private memory was shared");
      break;
    case Op::kMeta: {
      control::RemoteMeta m;
      check(control::decode_meta(p, a.payload.size(), &m) == 0, "kMeta: the answer does not decode");
      check(m.instances.size() == std::max<size_t>(1, r.names.size()), "kMeta: wrong instance count");
      return;
    }
  }
  check(d.done(), "an answer's payload is not exactly its op's");
}

int connect_server() {
  const std::string path = control::server_socket();
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  check(!path.empty() && path.size() < sizeof a.sun_path, "no control socket");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  check(fd >= 0, "socket");
  // A Unix socket connects at once or fails (the backlog is kMaxClients).
  check(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "connect to the server");
  return fd;
}

// Sends `out` while reading answers, until `want` answers came (and, with
// `until_close`, the close after them), the server closed, or it said
// nothing for idle_ms. The answers are appended to *answers.
bool exchange(int fd, const std::string& out, size_t want, bool until_close, int idle_ms,
              std::vector<Answer>* answers) {
  size_t sent = 0;
  std::string in;
  bool closed = false;
  while (!closed && (answers->size() < want || until_close)) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < out.size() ? POLLOUT : 0)), 0};
    const int n = ::poll(&p, 1, idle_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (p.revents & POLLOUT) {
      const ssize_t k = ::send(fd, out.data() + sent, out.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0)
        sent += static_cast<size_t>(k);
      else if (k < 0 && errno != EAGAIN && errno != EINTR)
        sent = out.size();  // closed on us
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[64 * 1024];
      const ssize_t k = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (k > 0)
        in.append(buf, static_cast<size_t>(k));
      else if (k == 0 || (errno != EAGAIN && errno != EINTR))
        closed = true;  // ECONNRESET too
    }
    while (in.size() >= 4) {
      const uint32_t len = le32(reinterpret_cast<const uint8_t*>(in.data()));
      check(len >= 8 && len <= control::kMaxResponse, "an answer's length is out of bounds");
      if (in.size() < 4 + static_cast<size_t>(len)) break;
      Decoder d(reinterpret_cast<const uint8_t*>(in.data()) + 4, 8);
      Answer a;
      a.status = d.i32();
      a.flags = d.u32();
      a.payload.assign(in, 12, len - 8);
      answers->push_back(std::move(a));
      in.erase(0, 4 + static_cast<size_t>(len));
    }
  }
  check(!closed || in.empty(), "the server closed in the middle of an answer");
  return closed;
}

// One request on its own, answered within kHealthMs.
Answer call(int fd, const Request& r) {
  std::string msg;
  control::encode_request(r, &msg);
  std::vector<Answer> answers;
  exchange(fd, msg, 1, false, kHealthMs, &answers);
  check(answers.size() == 1, "the server does not answer a well-formed request any more");
  return answers[0];
}

// The server still serves: a fresh connection gets a correct kHello and
// kStat of "trace", and removes the instances the input made.
void check_health() {
  const int fd = connect_server();
  Request r;
  r.op = Op::kHello;
  check_answer({r, 0}, call(fd, r));
  r.op = Op::kStat;
  r.path = "trace";
  const Answer st = call(fd, r);
  check(st.status == 0 && st.payload == std::string("\0\xa0\x01\0\0", 5), "kStat trace: not a 0640 file");
  // The input's connection is gone by now (the server dropped it in the
  // round it answered our kHello), and so are its references.
  r.op = Op::kRmdir;
  for (const std::string& name : Instance::names()) {
    r.path = "instances/" + name;
    check(call(fd, r).status == 0, "an instance the input made cannot be removed");
  }
  ::close(fd);
}

// Every input starts from the same state (tracefs_write_fuzzer.cc's reset).
void reset() {
  Instance* top = Instance::top();
  tracefs::write_file("set_event", "");
  tracefs::write_file("set_event_pid", "");
  tracefs::write_file("set_event_notrace_pid", "");
  tracefs::write_file("events/ctlfuzz/evt/filter", "0");
  top->set_tracing_on(true);
  top->set_cpumask({});
  for (const int i : usrtrace::instance::listed_options())
    top->set_option(static_cast<usrtrace::instance::Option>(i),
                    usrtrace::instance::option_info(i).default_on);
  if (top->buffer().clock() != usrtrace::clock::ClockId::kLocal)
    top->buffer().set_clock(usrtrace::clock::ClockId::kLocal);
  top->buffer().resize(-1, 64 * 1024);  // free_buffer may have shrunk it
  top->buffer().reset();
  top->clear_error_log();
}

// The byte count a body starting at p (n bytes there) parses as, or 0 when
// it does not parse: decode_request()'s fields, read greedily.
size_t parsed_len(const uint8_t* p, size_t n) {
  Decoder d(p, n);
  const uint8_t op = d.u8();
  auto str = [&d] { d.bytes(d.u32()); };
  switch (static_cast<Op>(op)) {
    case Op::kHello:
      break;
    case Op::kStat:
    case Op::kList:
    case Op::kMkdir:
    case Op::kRmdir:
    case Op::kShare:
      str();
      break;
    case Op::kOpen:
      str();
      d.u32();
      break;
    case Op::kRead:
      d.u32();
      d.u32();
      d.u32();
      break;
    case Op::kWrite:
      d.u32();
      str();
      break;
    case Op::kClose:
      d.u32();
      break;
    case Op::kPages:
      str();
      d.u32();
      d.u32();
      d.u8();
      break;
    case Op::kMeta: {
      const uint32_t k = d.u32();
      for (uint32_t i = 0; i < k && i <= control::kMaxInstancesPerMeta && d.ok(); ++i) str();
      break;
    }
    case Op::kRecord:
      d.u8();
      break;
    default:
      return 0;
  }
  return d.ok() ? n - d.left() : 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string err;
  if (control::start_server(&err) != 0) {
    fprintf(stderr, "control_request_fuzzer: no server: %s\n", err.c_str());
    abort();
  }
  Instance::top()->buffer().resize(-1, 64 * 1024);  // small: reads of trace stay fast
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed & 1) return size;  // half the mutants keep their raw framing
  for (size_t at = 0; size - at >= 5;) {
    const size_t len = parsed_len(data + at + 4, size - at - 4);
    if (len == 0) break;
    for (int i = 0; i < 4; ++i) data[at + static_cast<size_t>(i)] = static_cast<uint8_t>(len >> (8 * i));
    at += 4 + len;
  }
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Layer 1.
  Request whole;
  decode_round_trip(data, size, &whole);

  // Layer 2.
  reset();
  trace_ctlfuzz_evt(static_cast<int32_t>(size));  // something for the pipes to read
  tracefs::write_file("trace_marker", "control fuzz");
  std::string out;
  std::vector<Expect> expect;
  plan(data, size, &out, &expect);
  const bool refused = !expect.empty() && expect.back().refused != 0;
  const int fd = connect_server();
  std::vector<Answer> answers;
  const bool closed = exchange(fd, out, expect.size(), refused, kIdleMs, &answers);
  ::close(fd);
  // It must neither drop a client it owes answers nor sit on requests it
  // holds (a pipelined request waited for more bytes that never came).
  check(answers.size() == expect.size(),
        closed ? "the server closed without answering" : "the server stalled with requests to answer");
  check(answers.size() <= expect.size(), "more answers than requests");
  for (size_t i = 0; i < answers.size(); ++i) check_answer(expect[i], answers[i]);
  check(!refused || closed, "no close after a refusal");
  check_health();
  return 0;
}
