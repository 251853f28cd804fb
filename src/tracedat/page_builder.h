// Encodes records into ring-buffer pages in the kernel's format, for data
// that does not come from a live buffer as pages (a recovered buffer file
// written out as a trace.dat). Live recording never uses it: it copies the
// buffer's own pages.
#pragma once

#include <cstdint>
#include <vector>

namespace usrtrace::tracedat {

class PageBuilder {
 public:
  explicit PageBuilder(uint32_t page_size) : page_size_(page_size) {}
  // Appends a record (common fields first) with time `ts`; `lost_before`
  // events were lost right before it (the page it starts says so). Times
  // must not go backwards (a smaller one is written as the previous one).
  // Records too large for a page are left out (returns false).
  bool add(uint64_t ts, const uint8_t* data, uint32_t len, uint64_t lost_before);
  // The pages, whole; the builder is empty after.
  std::vector<uint8_t> finish();

 private:
  void close_page();
  void open_page(uint64_t ts);
  uint32_t page_size_;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> page_;
  uint32_t used_ = 0;  // data bytes on the open page
  uint64_t last_ts_ = 0;
  uint64_t missed_ = 0;  // lost before the open page
  bool open_ = false;
};

}  // namespace usrtrace::tracedat
