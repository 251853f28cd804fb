#include "tracedat/page_builder.h"

#include <cstring>

#include "ring_buffer/page_format.h"

namespace usrtrace::tracedat {

void PageBuilder::open_page(uint64_t ts) {
  page_.assign(page_size_, 0);
  std::memcpy(page_.data(), &ts, 8);
  used_ = 0;
  last_ts_ = ts;
  open_ = true;
}

void PageBuilder::close_page() {
  if (!open_) return;
  uint64_t commit = used_;
  if (missed_ != 0) {
    commit |= rb::kMissedEvents;
    if (rb::kPageHeaderSize + used_ + 8 <= page_size_) {
      std::memcpy(page_.data() + rb::kPageHeaderSize + used_, &missed_, 8);
      commit |= rb::kMissedStored;
    }
  }
  std::memcpy(page_.data() + 8, &commit, 8);
  out_.insert(out_.end(), page_.begin(), page_.end());
  open_ = false;
  missed_ = 0;
}

bool PageBuilder::add(uint64_t ts, const uint8_t* data, uint32_t len, uint64_t lost_before) {
  const rb::EntryLayout l = rb::entry_layout(len);
  const uint32_t room = page_size_ - rb::kPageHeaderSize - 8;  // 8: a lost count after the data
  if (l.size > room) return false;
  if (lost_before != 0) {
    close_page();
    missed_ = lost_before;
  }
  if (ts < last_ts_) ts = last_ts_;
  uint64_t delta = open_ ? ts - last_ts_ : 0;
  const uint32_t extend = delta > rb::kTsDeltaMax ? 8 : 0;
  if (open_ && used_ + extend + l.size > room) close_page();  // the next page starts at ts
  if (!open_) {
    const uint64_t m = missed_;
    open_page(ts);
    missed_ = m;
    delta = 0;
  }
  uint8_t* p = page_.data() + rb::kPageHeaderSize + used_;
  if (delta > rb::kTsDeltaMax) {  // a time extend carries the delta
    const uint32_t w[2] = {
        rb::encode_header(rb::kTypeTimeExtend, static_cast<uint32_t>(delta & rb::kTsDeltaMax)),
        static_cast<uint32_t>(delta >> rb::kTsShift)};
    std::memcpy(p, w, 8);
    p += 8;
    used_ += 8;
    delta = 0;
  }
  if (l.type_len == 0) {
    const uint32_t w[2] = {rb::encode_header(0, static_cast<uint32_t>(delta)), l.payload + 4};
    std::memcpy(p, w, 8);
  } else {
    const uint32_t w = rb::encode_header(l.type_len, static_cast<uint32_t>(delta));
    std::memcpy(p, &w, 4);
  }
  std::memcpy(p + l.header, data, len);  // the rest is the page's zeros
  used_ += l.size;
  last_ts_ = ts;
  return true;
}

std::vector<uint8_t> PageBuilder::finish() {
  close_page();
  std::vector<uint8_t> out;
  out.swap(out_);
  return out;
}

}  // namespace usrtrace::tracedat
