// CommitChannel's defaults for stores that cannot block on a key or read
// several at once, and the pause between polls.
#include "stint/commit_channel.h"

#include <algorithm>
#include <thread>

#include "base/channel_poll.h"

namespace stint {

using Clock = std::chrono::steady_clock;

bool PauseBeforeNextPoll(Clock::time_point deadline, std::chrono::milliseconds* pause) {
  auto now = Clock::now();
  if (now >= deadline) return false;
  std::this_thread::sleep_for(std::min<Clock::duration>(*pause, deadline - now));
  *pause = std::min(*pause * 2, std::chrono::milliseconds(100));
  return true;
}

Result<std::optional<std::string>> CommitChannel::WaitFor(const std::string& key,
                                                          Clock::time_point deadline) {
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    STINT_ASSIGN_OR_RETURN(std::optional<std::string> v, GetBy(key, deadline));
    if (v) return v;
    if (!PauseBeforeNextPoll(deadline, &pause)) return std::optional<std::string>();
  }
}

Result<std::vector<std::optional<std::string>>> CommitChannel::GetMany(
    const std::vector<std::string>& keys, Clock::time_point deadline) {
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) {
    STINT_ASSIGN_OR_RETURN(std::optional<std::string> v, GetBy(key, deadline));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace stint
