#include "stintd/server/log_tails.h"

namespace stint::stintd {

LogTails::LogTails(size_t max_bytes_per_job) : max_bytes_per_job_(max_bytes_per_job) {}

void LogTails::Append(int64_t job_id, int64_t segment_id, int rank, uint64_t offset,
                      uint64_t raw_size, const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    JobLog& log = jobs_[job_id];
    uint64_t& end = log.ends[{segment_id, rank}];
    // A repeat of what arrived already: the agent's earlier heartbeat got
    // through but its answer did not. Sent again whole, never split.
    if (offset + raw_size <= end || text.empty()) return;
    end = offset + raw_size;
    log.chunks.push_back({++log.last_seq, segment_id, rank, text});
    log.bytes += text.size();
    while (log.bytes > max_bytes_per_job_ && log.chunks.size() > 1) {
      log.bytes -= log.chunks.front().text.size();
      log.chunks.pop_front();
    }
  }
  cv_.notify_all();
}

LogTails::Tail LogTails::Read(int64_t job_id, int64_t after, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  auto last_seq = [&]() -> int64_t {
    auto it = jobs_.find(job_id);
    return it == jobs_.end() ? 0 : it->second.last_seq;
  };
  // A cursor beyond the newest chunk is from before a restart of stintd
  // (numbering started over): start from the beginning.
  if (after > last_seq()) after = 0;
  cv_.wait_for(lock, wait, [&] { return shutdown_ || last_seq() > after; });
  Tail tail;
  tail.next = after;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return tail;
  const JobLog& log = it->second;
  tail.dropped = !log.chunks.empty() && log.chunks.front().seq > after + 1;
  for (const LogChunk& c : log.chunks) {
    if (c.seq > after) tail.chunks.push_back(c);
  }
  tail.next = log.last_seq;
  return tail;
}

void LogTails::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

}  // namespace stint::stintd
