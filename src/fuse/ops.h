// The FUSE mount's state and its fuse_operations (fuse_ops.cc); private to
// src/fuse.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <memory>

#include "fuse/pool.h"

struct fuse_operations;

namespace usrtrace::fusefs {

// What every operation reaches through fuse_get_context()->private_data.
struct Fs {
  Fs(int pid_in, std::unique_ptr<control::Client> first) : pool(pid_in, std::move(first)), pid(pid_in) {}
  Pool pool;
  const int pid;
  uid_t uid = 0;  // the mounting user owns every file
  gid_t gid = 0;
  timespec mounted_at{};  // every file's times (tracefs has none worth showing)
};

const fuse_operations* operations();

}  // namespace usrtrace::fusefs
