#include "fuse/pool.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace usrtrace::fusefs {
namespace {

bool alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

uint64_t queue(const Conn* c) { return c->next_ticket - c->serving; }

// The better of two connections of the same role for a request: a general
// request goes where the queue is shortest; a pipe goes where the fewest
// files are (ideally none: a connection of its own).
bool better(const Conn* a, const Conn* b, Role role) {
  if (role == Role::kPipe && a->files != b->files) return a->files < b->files;
  if (queue(a) != queue(b)) return queue(a) < queue(b);
  return a->files < b->files;
}

}  // namespace

Pool::Pool(int pid, std::unique_ptr<control::Client> first) : pid_(pid) {
  if (!first) return;
  auto c = std::make_unique<Conn>();
  c->client = std::move(first);
  base::MutexLock l(&mu_);
  conns_.push_back(std::move(c));
}

int Pool::acquire(Role role, bool for_open, Conn** out) {
  bool switched = false;
  mu_.lock();
  for (;;) {
    int live = 0, pipes = 0;
    Conn* best = nullptr;
    for (const auto& p : conns_) {
      Conn* c = p.get();
      if (c->dead) continue;
      ++live;
      if (c->role == Role::kPipe) ++pipes;
      if (c->role != role || (for_open && c->files >= kFilesPerConn)) continue;
      if (!best || better(c, best, role)) best = c;
    }
    // A pipe wants a connection of its own; the rest want one at all.
    const bool want_new = !best || (role == Role::kPipe && best->files > 0);
    const bool may_connect =
        live + connecting_ < max_conns_ && (role == Role::kGeneral || pipes + connecting_ < kMaxPipeConns);
    if (want_new && may_connect) {
      // Connect without the lock: other requests go on meanwhile.
      ++connecting_;
      mu_.unlock();
      std::string err;
      auto client = control::Client::connect(pid_, &err);
      mu_.lock();
      --connecting_;
      if (client) {
        auto c = std::make_unique<Conn>();
        c->client = std::move(client);
        c->role = role;
        c->next_ticket = 1;  // ticket 0, ours: its turn at once
        *out = c.get();
        conns_.push_back(std::move(c));
        mu_.unlock();
        return 0;
      }
      turn_.notify_all();  // waiters may count on this connection no more
      if (!alive(pid_)) {
        mu_.unlock();
        return -ENODEV;
      }
      if (live == 0) {  // refused (too many clients), and nothing to share
        mu_.unlock();
        return -EUSERS;
      }
      // The server is full: make do with the connections we have.
      max_conns_ = std::max(1, live);
      continue;
    }
    if (best) {
      wait_turn(best);
      mu_.unlock();
      *out = best;
      return 0;
    }
    if (connecting_ > 0) {  // one being made may serve us
      turn_.wait(mu_);
      continue;
    }
    if (!switched && live > 0) {
      // None of this role to be had (every one full of files, or the
      // server full): share one of the other role.
      role = role == Role::kPipe ? Role::kGeneral : Role::kPipe;
      switched = true;
      continue;
    }
    mu_.unlock();
    return live > 0 ? -EMFILE : -ENODEV;
  }
}

void Pool::acquire(Conn* c) {
  base::MutexLock l(&mu_);
  wait_turn(c);
}

void Pool::wait_turn(Conn* c) {
  const uint64_t ticket = c->next_ticket++;
  while (c->serving != ticket) turn_.wait(mu_);
}

void Pool::release(Conn* c, bool failed) {
  {
    base::MutexLock l(&mu_);
    ++c->serving;
    if (failed) c->dead = true;
    drop_if_unused(c);
  }
  turn_.notify_all();
}

void Pool::add_files(Conn* c, int delta) {
  {
    base::MutexLock l(&mu_);
    c->files += delta;
    drop_if_unused(c);
  }
  turn_.notify_all();
}

void Pool::drop_if_unused(Conn* c) {
  // A dead connection that no open file or waiting request refers to can
  // go: a new one takes its place if the process is still there.
  if (!c->dead || queue(c) > 0 || c->files > 0) return;
  std::erase_if(conns_, [c](const std::unique_ptr<Conn>& p) { return p.get() == c; });
}

}  // namespace usrtrace::fusefs
