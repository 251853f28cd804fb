#include "control/protocol.h"

#include <cerrno>
#include <cstring>

namespace usrtrace::control {

void Encoder::u32(uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out_->append(b, 4);
}

void Encoder::u64(uint64_t v) {
  u32(static_cast<uint32_t>(v));
  u32(static_cast<uint32_t>(v >> 32));
}

void Encoder::str(std::string_view s) {
  u32(static_cast<uint32_t>(s.size()));
  out_->append(s);
}

const uint8_t* Decoder::bytes(size_t n) {
  if (!ok_ || n > n_) {
    ok_ = false;
    return nullptr;
  }
  const uint8_t* p = p_;
  p_ += n;
  n_ -= n;
  return p;
}

uint8_t Decoder::u8() {
  const uint8_t* p = bytes(1);
  return p ? p[0] : 0;
}

uint32_t Decoder::u32() {
  const uint8_t* p = bytes(4);
  if (!p) return 0;
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

uint64_t Decoder::u64() {
  const uint64_t lo = u32();
  return lo | static_cast<uint64_t>(u32()) << 32;
}

std::string Decoder::str(size_t max) {
  const uint32_t len = u32();
  if (len > max) {
    ok_ = false;
    return {};
  }
  const uint8_t* p = bytes(len);
  return p ? std::string(reinterpret_cast<const char*>(p), len) : std::string();
}

void finish_message(std::string* msg, size_t at) {
  const size_t body = msg->size() - at - 4;
  for (int i = 0; i < 4; ++i)
    (*msg)[at + static_cast<size_t>(i)] = static_cast<char>((body >> (8 * i)) & 0xff);
}

void encode_request(const Request& r, std::string* out) {
  const size_t at = out->size();
  out->append(4, '\0');
  Encoder e(out);
  e.u8(static_cast<uint8_t>(r.op));
  switch (r.op) {
    case Op::kHello:
      break;
    case Op::kStat:
    case Op::kList:
    case Op::kMkdir:
    case Op::kRmdir:
    case Op::kShare:
      e.str(r.path);
      break;
    case Op::kOpen:
      e.str(r.path);
      e.u32(r.flags);
      break;
    case Op::kRead:
      e.u32(r.handle);
      e.u32(r.size);
      e.u32(r.wait_ms);
      break;
    case Op::kWrite:
      e.u32(r.handle);
      e.str(r.data);
      break;
    case Op::kClose:
      e.u32(r.handle);
      break;
    case Op::kPages:
      e.str(r.path);
      e.u32(r.size);
      e.u32(r.wait_ms);
      e.u8(r.on ? 1 : 0);
      break;
    case Op::kMeta:
      e.u32(static_cast<uint32_t>(r.names.size()));
      for (const auto& n : r.names) e.str(n);
      break;
    case Op::kRecord:
      e.u8(r.on ? 1 : 0);
      break;
  }
  finish_message(out, at);
}

int decode_request(const uint8_t* body, size_t len, Request* out) {
  if (len > kMaxRequest) return -EPROTO;
  Decoder d(body, len);
  Request r;
  const uint8_t op = d.u8();
  auto flag = [&d] {
    const uint8_t v = d.u8();
    if (v > 1) return std::make_pair(false, false);
    return std::make_pair(true, v == 1);
  };
  switch (static_cast<Op>(op)) {
    case Op::kHello:
      break;
    case Op::kStat:
    case Op::kList:
    case Op::kMkdir:
    case Op::kRmdir:
    case Op::kShare:
      r.path = d.str(kMaxPath);
      break;
    case Op::kOpen:
      r.path = d.str(kMaxPath);
      r.flags = d.u32();
      break;
    case Op::kRead:
      r.handle = d.u32();
      r.size = d.u32();
      r.wait_ms = d.u32();
      if (r.size > kMaxData || r.wait_ms > kMaxWaitMs) return -EPROTO;
      break;
    case Op::kWrite:
      r.handle = d.u32();
      r.data = d.str(kMaxData);
      break;
    case Op::kClose:
      r.handle = d.u32();
      break;
    case Op::kPages: {
      r.path = d.str(kMaxPath);
      r.size = d.u32();
      r.wait_ms = d.u32();
      const auto [ok, on] = flag();
      if (!ok || r.size > kMaxData || r.wait_ms > kMaxWaitMs) return -EPROTO;
      r.on = on;
      break;
    }
    case Op::kMeta: {
      const uint32_t n = d.u32();
      if (n > kMaxInstancesPerMeta) return -EPROTO;
      for (uint32_t i = 0; i < n && d.ok(); ++i) r.names.push_back(d.str(kMaxPath));
      break;
    }
    case Op::kRecord: {
      const auto [ok, on] = flag();
      if (!ok) return -EPROTO;
      r.on = on;
      break;
    }
    default:
      return -EPROTO;
  }
  if (!d.done()) return -EPROTO;
  if (r.path.find('\0') != std::string::npos) return -EPROTO;
  r.op = static_cast<Op>(op);
  *out = std::move(r);
  return 0;
}

}  // namespace usrtrace::control
