#pragma once
// What a child of Kiln's process gets before it execs another program. A
// server that waits for SIGTERM with sigwait blocks it in every thread, and a
// forked child keeps that mask through exec: a job or an instance started
// from there could then not be stopped. Only async-signal-safe calls, as
// between fork and exec in a threaded process.
#include <signal.h>

namespace kiln::detail {

// Unblocks every signal and puts the stopping ones back to their defaults
// (a handler is reset by exec anyway; an ignored signal would stay ignored).
inline void reset_signals_for_exec() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace kiln::detail
