#include "base/sigpipe_block.h"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace stint {
namespace {

// pthread_sigmask fails only for a bad `how`: a bug, not a condition.
void Mask(int how, const sigset_t* set, sigset_t* old) {
  if (int err = pthread_sigmask(how, set, old); err != 0) {
    std::fprintf(stderr, "stint: pthread_sigmask: %s\n", std::strerror(err));
    std::abort();
  }
}

}  // namespace

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  Mask(SIG_BLOCK, &pipe_, &old_);
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (!sigismember(&old_, SIGPIPE)) {
    // Only when it was not blocked already: then it is the caller's.
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
  }
  Mask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace stint
