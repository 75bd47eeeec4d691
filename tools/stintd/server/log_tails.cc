#include "stintd/server/log_tails.h"

namespace stint::stintd {

LogTails::LogTails(size_t max_bytes_per_job, size_t max_bytes)
    : max_bytes_per_job_(max_bytes_per_job), max_bytes_(max_bytes) {}

void LogTails::DropOldest(JobLog* log, int64_t seq) {
  if (log->chunks.empty() || log->chunks.front().seq != seq) return;  // gone already
  log->bytes -= log->chunks.front().text.size();
  bytes_ -= log->chunks.front().text.size();
  log->chunks.pop_front();
}

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
    bytes_ += text.size();
    order_.emplace_back(job_id, log.last_seq);
    while (log.bytes > max_bytes_per_job_ && log.chunks.size() > 1) {
      DropOldest(&log, log.chunks.front().seq);
    }
    while (bytes_ > max_bytes_ && order_.size() > 1) {
      auto [job, seq] = order_.front();
      order_.pop_front();
      DropOldest(&jobs_[job], seq);
    }
    // Entries of chunks the per-job cap dropped go once they are oldest, so
    // order_ holds at most the chunks appended since the oldest one held.
    while (!order_.empty()) {
      const JobLog& front = jobs_[order_.front().first];
      if (!front.chunks.empty() && front.chunks.front().seq <= order_.front().second) break;
      order_.pop_front();
    }
  }
  cv_.notify_all();
}

LogTails::Tail LogTails::Read(int64_t job_id, int64_t after, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  JobLog& log = jobs_[job_id];  // std::map: stays put while others are added
  // A cursor beyond the newest chunk is from before a restart of stintd
  // (numbering started over): start from the beginning.
  if (after > log.last_seq) after = 0;
  const int64_t wakes = log.wakes;
  cv_.wait_for(lock, wait, [&] { return shutdown_ || log.last_seq > after || log.wakes != wakes; });
  Tail tail;
  tail.dropped = !log.chunks.empty() && log.chunks.front().seq > after + 1;
  for (const LogChunk& c : log.chunks) {
    if (c.seq > after) tail.chunks.push_back(c);
  }
  tail.next = log.last_seq;
  return tail;
}

void LogTails::Wake(int64_t job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[job_id].wakes++;
  }
  cv_.notify_all();
}

void LogTails::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

}  // namespace stint::stintd
