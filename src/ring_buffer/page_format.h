// The kernel ftrace ring buffer's binary format (ABI), defined once.
//
// A page ("sub-buffer") is a power-of-two block, 4 KiB by default:
//
//   offset 0   u64 timestamp   clock value of the page; the first entry's
//                              delta is relative to it
//   offset 8   u64 commit      bytes of entries after the header, plus
//                              bit 31 (kMissedEvents): events were lost
//                              before this page, and bit 30 (kMissedStored):
//                              their count is a u64 at 16 + length
//   offset 16  data            entries, 4-byte aligned, back to back
//
// An entry starts with one 32-bit word: type_len in bits 0-4, time_delta in
// bits 5-31, then array[] words:
//
//   type_len   entry            size and meaning
//   1..28      data, short      payload of type_len*4 bytes after the word
//   0          data, long       array[0] = payload bytes + 4; payload at array[1]
//   29         padding          time_delta == 0: nothing valid follows;
//                               otherwise a discarded entry of 4 + array[0] bytes
//   30         time extend      8 bytes; adds (array[0] << 27) + time_delta
//   31         absolute stamp   8 bytes; time = (array[0] << 27) + time_delta
//
// This matches events/header_page and events/header_event of a 64-bit kernel
// and what libtraceevent's kbuffer parses (see ../shared/ftrace-formats.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace usrtrace::rb {

// ABI: struct buffer_data_page.
struct PageHeader {
  uint64_t timestamp;
  uint64_t commit;
};
static_assert(sizeof(PageHeader) == 16);
static_assert(offsetof(PageHeader, commit) == 8);

inline constexpr uint32_t kPageHeaderSize = 16;
inline constexpr uint32_t kMinPageSize = 4096;
inline constexpr uint32_t kMaxPageSize = 65536;
inline constexpr uint64_t kMissedEvents = 1ull << 31;
inline constexpr uint64_t kMissedStored = 1ull << 30;
// Bits of `commit` that hold the length (kbuffer masks the same 27 bits).
inline constexpr uint64_t kCommitLengthMask = (1ull << 27) - 1;

inline constexpr uint32_t kTypeDataMax = 28;
inline constexpr uint32_t kTypePadding = 29;
inline constexpr uint32_t kTypeTimeExtend = 30;
inline constexpr uint32_t kTypeTimeStamp = 31;
inline constexpr uint32_t kTsShift = 27;
inline constexpr uint64_t kTsDeltaMax = (1ull << kTsShift) - 1;
inline constexpr uint32_t kMaxShortPayload = kTypeDataMax * 4;  // 112

constexpr uint32_t round_up4(uint32_t n) { return (n + 3u) & ~3u; }

// What an entry of `payload_len` bytes occupies. A 0-byte payload counts as
// 4, as in the kernel, so a data entry is never shorter than 8 bytes.
struct EntryLayout {
  uint32_t payload;   // payload bytes stored (multiple of 4)
  uint32_t header;    // 4 (short form) or 8 (long form)
  uint32_t type_len;  // 1..28, or 0 for the long form
  uint32_t size;      // header + payload
};
constexpr EntryLayout entry_layout(uint32_t payload_len) {
  uint32_t p = round_up4(payload_len == 0 ? 1 : payload_len);
  bool long_form = p > kMaxShortPayload;
  uint32_t h = long_form ? 8u : 4u;
  return {p, h, long_form ? 0u : p / 4, h + p};
}

constexpr uint32_t encode_header(uint32_t type_len, uint32_t delta) { return (delta << 5) | type_len; }

// One decoded entry, from a page that may come from anywhere (our buffers, a
// file, a fuzzer): every length is checked against what is left.
struct Entry {
  uint32_t type_len;
  uint32_t offset;         // of the entry within the data area
  uint32_t size;           // whole entry
  uint64_t ts;             // running time after this entry (data: its time)
  const uint8_t* payload;  // data entries only
  uint32_t payload_len;    // data entries only (rounded to 4, as stored)
};

// Walks the entries of one page's data, computing timestamps the way kbuffer
// does: padding and time-extend deltas add to the running time, an absolute
// stamp replaces it.
class PageWalker {
 public:
  // `data` points at the data area (page + 16), `len` bytes long; `ts` is the
  // running time at `start` (the page timestamp when start == 0).
  PageWalker(const uint8_t* data, uint32_t len, uint64_t ts, uint32_t start = 0)
      : data_(data), len_(len), off_(start), ts_(ts) {}

  enum class Step { kData, kOther, kEnd, kCorrupt };

  // Decodes the entry at the current offset and moves past it.
  Step next(Entry* e) {
    if (off_ >= len_) return Step::kEnd;
    if (len_ - off_ < 4) return Step::kCorrupt;
    uint32_t w;
    std::memcpy(&w, data_ + off_, 4);
    uint32_t type_len = w & 31u, delta = w >> 5;
    uint32_t size = 0;
    const uint8_t* payload = nullptr;
    uint32_t payload_len = 0;
    auto arr0 = [&](uint32_t* out) {
      if (len_ - off_ < 8) return false;
      std::memcpy(out, data_ + off_ + 4, 4);
      return true;
    };
    Step kind = Step::kOther;
    switch (type_len) {
      case kTypePadding: {
        if (delta == 0) {  // the rest of the page is padding
          off_ = len_;
          return Step::kEnd;
        }
        uint32_t a;
        if (!arr0(&a) || a < 4 || a > len_ - off_ - 4) return Step::kCorrupt;
        size = 4 + a;
        ts_ += delta;
        break;
      }
      case kTypeTimeExtend: {
        uint32_t a;
        if (!arr0(&a)) return Step::kCorrupt;
        size = 8;
        ts_ += (static_cast<uint64_t>(a) << kTsShift) + delta;
        break;
      }
      case kTypeTimeStamp: {
        uint32_t a;
        if (!arr0(&a)) return Step::kCorrupt;
        size = 8;
        uint64_t abs = (static_cast<uint64_t>(a) << kTsShift) + delta;
        ts_ = (ts_ & ~((1ull << 59) - 1)) | abs;
        break;
      }
      case 0: {
        uint32_t a;
        if (!arr0(&a) || a < 4 || a > len_ - off_ - 4) return Step::kCorrupt;
        size = 4 + a;
        payload = data_ + off_ + 8;
        payload_len = a - 4;
        ts_ += delta;
        kind = Step::kData;
        break;
      }
      default: {
        size = 4 + type_len * 4;
        if (size > len_ - off_) return Step::kCorrupt;
        payload = data_ + off_ + 4;
        payload_len = type_len * 4;
        ts_ += delta;
        kind = Step::kData;
        break;
      }
    }
    if (size % 4 != 0) return Step::kCorrupt;
    *e = Entry{type_len, off_, size, ts_, payload, payload_len};
    off_ += size;
    return kind;
  }

  // Advances to the next data entry; false at the end or on corruption.
  bool next_data(Entry* e) {
    for (;;) {
      Step s = next(e);
      if (s == Step::kData) return true;
      if (s != Step::kOther) {
        corrupt_ = s == Step::kCorrupt;
        return false;
      }
    }
  }

  uint32_t offset() const { return off_; }
  uint64_t ts() const { return ts_; }
  bool corrupt() const { return corrupt_; }

 private:
  const uint8_t* data_;
  uint32_t len_;
  uint32_t off_;
  uint64_t ts_;
  bool corrupt_ = false;
};

// The text of events/header_page and events/header_event, as a 64-bit kernel
// prints them for a page of `page_size` bytes.
std::string header_page_text(uint32_t page_size);
std::string header_event_text();

}  // namespace usrtrace::rb
