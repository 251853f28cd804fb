// Built-in events of the thread lifecycle (system "usrtrace"), the user-space
// counterparts of the kernel's task_rename and sched_process_exit:
//
//   usrtrace:thread_rename  a thread renamed itself (pthread_setname_np)
//   usrtrace:thread_exit    a thread that wrote events is exiting
//
// Both also keep saved_cmdlines current.
#pragma once

#include "usrtrace/event.h"

USRTRACE_EVENT(usrtrace, thread_rename, (int32_t, pid)(char[16], oldcomm)(char[16], newcomm),
               "pid=%d oldcomm=%s newcomm=%s", REC->pid, REC->oldcomm, REC->newcomm)

USRTRACE_EVENT(usrtrace, thread_exit, (char[16], comm)(int32_t, pid), "comm=%s pid=%d", REC->comm, REC->pid)

namespace usrtrace::events {

// Called by the writer registry when a registered thread exits.
// Context: the exiting thread, from a pthread key destructor.
void on_thread_exit(int tid);

}  // namespace usrtrace::events
