// LogTails: the recent output of each job's launched workers, as their
// stint-agents upload it with their node heartbeats (API.md, "Logs"), for
// `GET /v1/jobs/{id}/logs` (stintctl logs). Soft state: kept in memory, the
// newest bytes of each job up to a cap, lost when stintd restarts (the
// agents' log files stay the record).
//
// Thread-safe.
#ifndef STINT_TOOLS_STINTD_SERVER_LOG_TAILS_H_
#define STINT_TOOLS_STINTD_SERVER_LOG_TAILS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace stint::stintd {

struct LogChunk {
  int64_t seq = 0;  // per job, from 1, increasing
  int64_t segment_id = 0;
  int rank = 0;
  std::string text;
};

class LogTails {
 public:
  // A job's chunks beyond `max_bytes_per_job`, and everyone's beyond
  // `max_bytes`, are dropped oldest first.
  explicit LogTails(size_t max_bytes_per_job = 4u << 20, size_t max_bytes = 256u << 20);

  // `text` is the log of (segment, rank) from byte `offset` on (offsets
  // count the agent's file bytes, `raw_size` of them in `text`). What this
  // already holds (a heartbeat repeated after a lost answer) is skipped; a
  // gap (stintd restarted) is accepted. Wakes Read()s of the job.
  void Append(int64_t job_id, int64_t segment_id, int rank, uint64_t offset, uint64_t raw_size,
              const std::string& text);

  struct Tail {
    std::vector<LogChunk> chunks;  // seq > after, in order
    int64_t next = 0;              // ask after this next time
    bool dropped = false;          // chunks after `after` were dropped by the cap
  };
  // The job's chunks after `after`; waits up to `wait` for one when there
  // is none yet (or until Shutdown()).
  Tail Read(int64_t job_id, int64_t after, std::chrono::milliseconds wait);

  // Read()s of the job in progress answer now (its state changed: a
  // follower should look again).
  void Wake(int64_t job_id);

  // Read()s in progress answer at once, later ones do not wait.
  void Shutdown();

 private:
  struct JobLog {
    std::deque<LogChunk> chunks;
    size_t bytes = 0;
    int64_t last_seq = 0;
    int64_t wakes = 0;                                 // Wake() calls
    std::map<std::pair<int64_t, int>, uint64_t> ends;  // (segment, rank) -> bytes received
  };

  // The front chunk of the job, if it is `seq`, goes.
  void DropOldest(JobLog* log, int64_t seq);

  const size_t max_bytes_per_job_;
  const size_t max_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::map<int64_t, JobLog> jobs_;
  std::deque<std::pair<int64_t, int64_t>> order_;  // (job, seq) of every chunk, oldest first
  size_t bytes_ = 0;
  bool shutdown_ = false;
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_LOG_TAILS_H_
