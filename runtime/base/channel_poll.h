// Polling a CommitChannel where it cannot block on a key.
#ifndef STINT_RUNTIME_BASE_CHANNEL_POLL_H_
#define STINT_RUNTIME_BASE_CHANNEL_POLL_H_

#include <chrono>

namespace stint {

// Sleeps before the next poll: *pause (start it at 2 ms), then doubles it up
// to 100 ms, so a quick answer costs little latency and a long wait little
// traffic. False, without sleeping, once `deadline` has passed.
bool PauseBeforeNextPoll(std::chrono::steady_clock::time_point deadline,
                         std::chrono::milliseconds* pause);

}  // namespace stint

#endif  // STINT_RUNTIME_BASE_CHANNEL_POLL_H_
