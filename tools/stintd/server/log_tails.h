// LogTails: the recent output of each job's launched workers, as their
// stint-agents upload it with their node heartbeats (API.md, "Logs"), for
// `GET /v1/jobs/{id}/logs` (stintctl logs). The newest bytes of each job up
// to a cap, in memory, and with Persist() also in append-only files (one
// per job, rotated at the cap) that a restarted stintd reloads, chunk
// numbers included, so a follower's cursor stays valid.
//
// Files: DIR/job-<id>.log and the previous one, DIR/job-<id>.log.1. Each
// record is a line "C <seq> <segment_id> <rank> <end> <length>" (`end`:
// the agent's file offset after the chunk, for the repeat check), then
// `length` bytes of text and "\n". A record cut short by a crash ends the
// file; it is cut off on load. Appends are written, not fsynced: the page
// cache outlives a stintd crash or restart, and after a machine crash the
// agents' log files under their --workdir stay the record.
//
// Thread-safe.
#ifndef STINT_TOOLS_STINTD_SERVER_LOG_TAILS_H_
#define STINT_TOOLS_STINTD_SERVER_LOG_TAILS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "stint/status.h"

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

  // Keeps the tails in files under `dir` (created if missing) from now on,
  // after loading what an earlier stintd left there (the newest
  // max_bytes_per_job of each job, max_bytes in all). Fails if `dir` cannot
  // be made, listed or read. REQUIRES: called once, before any other call.
  Status Persist(const std::string& dir);

  // Forgets the output of every job that `keep(job_id)` refuses and whose
  // newest output is older than `min_age` (files and memory). Jobs never
  // written to disk are not looked at. Does nothing without Persist().
  // Returns how many jobs went; fails on a file it cannot remove.
  Result<int> Prune(const std::function<bool(int64_t)>& keep, std::chrono::seconds min_age);

  // `text` is the log of (segment, rank) from byte `offset` on (offsets
  // count the agent's file bytes, `raw_size` of them in `text`). What this
  // already holds (a heartbeat repeated after a lost answer) is skipped; a
  // gap (stintd restarted) is accepted. Wakes Read()s of the job. A file
  // that cannot be written is reported on stderr (once per job) and the
  // chunk is kept in memory only: output never fails a heartbeat.
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
    uint64_t file_bytes = 0;                           // of DIR/job-<id>.log
    bool write_failed = false;                         // reported once
  };

  // Appends `chunk` to the job's file, rotating it at the cap. REQUIRES: mu_.
  Status WriteChunk(int64_t job_id, JobLog* log, const LogChunk& chunk, uint64_t end);
  // Loads one job's file into `log` (cutting off a torn tail); a missing
  // file is empty.
  Status LoadFile(const std::string& path, bool current, JobLog* log,
                  std::vector<LogChunk>* chunks);
  std::string JobPath(int64_t job_id) const;

  // The front chunk of the job, if it is `seq`, goes.
  void DropOldest(JobLog* log, int64_t seq);
  // Holds the caps after `log` grew: its own, then the total (the oldest
  // chunks of all jobs go first).
  void Trim(JobLog* log);

  const size_t max_bytes_per_job_;
  const size_t max_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::map<int64_t, JobLog> jobs_;
  std::deque<std::pair<int64_t, int64_t>> order_;  // (job, seq) of every chunk, oldest first
  size_t bytes_ = 0;
  bool shutdown_ = false;
  std::string dir_;  // "" until Persist(): memory only
};

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_LOG_TAILS_H_
