// common_flags bits (the kernel's trace_flag_type, 6.13+) and what they mean
// in user space, where there are no interrupts:
//
//   kFlagHardirq  the event was written while another write on the same
//                 thread was in progress, i.e. from a signal handler that
//                 interrupted a write: printed 'h' in the hardirq/softirq
//                 column
//
// common_preempt_count's low nibble is the write nesting depth (0 for a
// plain write; 1 for a nested one and for trace_marker writes, which the
// kernel also shows at depth 1); printed in the preempt-depth column.
// The other columns (irqs-off, need-resched, migrate-disable) have no
// user-space meaning and print '.'.
#pragma once

#include <cstdint>

namespace usrtrace::output {

inline constexpr uint8_t kFlagIrqsOff = 0x01;
inline constexpr uint8_t kFlagNeedReschedLazy = 0x02;
inline constexpr uint8_t kFlagNeedResched = 0x04;
inline constexpr uint8_t kFlagHardirq = 0x08;
inline constexpr uint8_t kFlagSoftirq = 0x10;
inline constexpr uint8_t kFlagPreemptResched = 0x20;
inline constexpr uint8_t kFlagNmi = 0x40;
inline constexpr uint8_t kFlagBhOff = 0x80;

}  // namespace usrtrace::output
