// Reading a record's fields when the record is not trusted to be well
// formed (filters, hist triggers): the common fields as named fields, and
// integer fields read with a bounds check.
#pragma once

#include <cstdint>
#include <cstring>

#include "usrtrace/internal/event_impl.h"

namespace usrtrace::events {

// The kernel's common fields (CommonHeader), as filters and hist keys name them.
inline constexpr internal::FieldDesc kCommonFields[] = {
    {"common_type", "unsigned short", 0, 2, 0, false, internal::FieldKind::kInteger},
    {"common_flags", "unsigned char", 2, 1, 0, false, internal::FieldKind::kInteger},
    {"common_preempt_count", "unsigned char", 3, 1, 0, false, internal::FieldKind::kInteger},
    {"common_pid", "int", 4, 4, 0, true, internal::FieldKind::kInteger},
};

// The integer of `size` bytes (1, 2, 4 or 8) at `offset`, sign-extended when
// `is_signed`; 0 if it lies past `len`. Context: any, async-signal-safe.
inline uint64_t read_int_field(const void* rec, uint32_t len, uint16_t offset, uint16_t size,
                               bool is_signed) {
  if (static_cast<uint32_t>(offset) + size > len) return 0;
  const auto* p = static_cast<const uint8_t*>(rec) + offset;
  switch (size) {
    case 1: {
      uint8_t v;
      std::memcpy(&v, p, 1);
      return is_signed ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(v))) : v;
    }
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return is_signed ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(v))) : v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return is_signed ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(v))) : v;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

}  // namespace usrtrace::events
