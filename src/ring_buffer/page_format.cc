#include "ring_buffer/page_format.h"

namespace usrtrace::rb {

std::string header_page_text(uint32_t page_size) {
  std::string s;
  s += "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n";
  s += "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n";
  s += "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n";
  s += "\tfield: char data;\toffset:16;\tsize:" + std::to_string(page_size - kPageHeaderSize) +
       ";\tsigned:0;\n";
  return s;
}

std::string header_event_text() {
  return "# compressed entry header\n"
         "\ttype_len    :    5 bits\n"
         "\ttime_delta  :   27 bits\n"
         "\tarray       :   32 bits\n"
         "\n"
         "\tpadding     : type == 29\n"
         "\ttime_extend : type == 30\n"
         "\ttime_stamp : type == 31\n"
         "\tdata max type_len  == 28\n";
}

}  // namespace usrtrace::rb
