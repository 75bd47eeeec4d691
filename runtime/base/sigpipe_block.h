// ScopedSigpipeBlock: holds SIGPIPE blocked on this thread while it writes
// to a socket, and swallows one raised meanwhile. TLS libraries write
// through write(2), not send(MSG_NOSIGNAL), so a peer that closed a TLS
// connection (its close_notify written to a peer that went away) would
// otherwise kill the whole process (exit 141). A library must not change
// the process's disposition; a thread's mask is its own, and the signal
// write(2) raises is directed at the writing thread. For the HTTP clients
// and servers (coord/, objstore/).
#ifndef STINT_RUNTIME_BASE_SIGPIPE_BLOCK_H_
#define STINT_RUNTIME_BASE_SIGPIPE_BLOCK_H_

#include <signal.h>

namespace stint {

class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_SIGPIPE_BLOCK_H_
