#include "stintd/server/log_tails.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>

namespace stint::stintd {
namespace {

// "job-<id>.log" or "job-<id>.log.1": the id, else 0.
int64_t JobOfFile(const std::string& name) {
  if (name.rfind("job-", 0) != 0) return 0;
  char* end = nullptr;
  const long long id = std::strtoll(name.c_str() + 4, &end, 10);
  if (end == name.c_str() + 4 || id <= 0) return 0;
  const std::string rest(end);
  return rest == ".log" || rest == ".log.1" ? id : 0;
}

Status ReadWholeFile(const std::string& path, std::string* out, bool* missing) {
  *missing = false;
  out->clear();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      *missing = true;
      return Status::OK();
    }
    return StatusFromErrno("open " + path, errno);
  }
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return StatusFromErrno("read " + path, err);
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  if (close(fd) != 0) return StatusFromErrno("close " + path, errno);
  return Status::OK();
}

}  // namespace

LogTails::LogTails(size_t max_bytes_per_job, size_t max_bytes)
    : max_bytes_per_job_(max_bytes_per_job), max_bytes_(max_bytes) {}

void LogTails::DropOldest(JobLog* log, int64_t seq) {
  if (log->chunks.empty() || log->chunks.front().seq != seq) return;  // gone already
  log->bytes -= log->chunks.front().text.size();
  bytes_ -= log->chunks.front().text.size();
  log->chunks.pop_front();
}

std::string LogTails::JobPath(int64_t job_id) const {
  return dir_ + "/job-" + std::to_string(job_id) + ".log";
}

void LogTails::Trim(JobLog* log) {
  while (log->bytes > max_bytes_per_job_ && log->chunks.size() > 1) {
    DropOldest(log, log->chunks.front().seq);
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

Status LogTails::WriteChunk(int64_t job_id, JobLog* log, const LogChunk& chunk, uint64_t end) {
  char head[128];
  std::snprintf(head, sizeof(head), "C %" PRId64 " %" PRId64 " %d %" PRIu64 " %zu\n", chunk.seq,
                chunk.segment_id, chunk.rank, end, chunk.text.size());
  const std::string record = head + chunk.text + "\n";
  const std::string path = JobPath(job_id);
  // Rotation keeps the newest max_bytes_per_job_ on disk, in at most two
  // files, whatever the job writes over its life.
  if (log->file_bytes > 0 && log->file_bytes + record.size() > max_bytes_per_job_) {
    if (rename(path.c_str(), (path + ".1").c_str()) != 0)
      return StatusFromErrno("rename " + path + " to " + path + ".1", errno);
    log->file_bytes = 0;
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return StatusFromErrno("open " + path, errno);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = write(fd, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      // A torn record would end the file for the next load: cut it off.
      if (ftruncate(fd, static_cast<off_t>(log->file_bytes)) != 0) {
        close(fd);
        return StatusFromErrno("write " + path + " (and truncate after)", err);
      }
      close(fd);
      return StatusFromErrno("write " + path, err);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return StatusFromErrno("close " + path, errno);
  log->file_bytes += record.size();
  return Status::OK();
}

Status LogTails::LoadFile(const std::string& path, bool current, JobLog* log,
                          std::vector<LogChunk>* chunks) {
  std::string data;
  bool missing = false;
  STINT_RETURN_IF_ERROR(ReadWholeFile(path, &data, &missing));
  if (missing) return Status::OK();
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t eol = data.find('\n', pos);
    if (eol == std::string::npos || eol - pos > 120) break;
    const std::string head = data.substr(pos, eol - pos);
    LogChunk c;
    uint64_t end = 0;
    size_t length = 0;
    int used = 0;
    if (std::sscanf(head.c_str(), "C %" SCNd64 " %" SCNd64 " %d %" SCNu64 " %zu%n", &c.seq,
                    &c.segment_id, &c.rank, &end, &length, &used) != 5 ||
        used != static_cast<int>(head.size()) || c.seq <= log->last_seq) {
      break;
    }
    if (data.size() - (eol + 1) < length + 1 || data[eol + 1 + length] != '\n') break;
    c.text = data.substr(eol + 1, length);
    pos = eol + 1 + length + 1;
    log->last_seq = c.seq;
    uint64_t& e = log->ends[{c.segment_id, c.rank}];
    e = std::max(e, end);
    chunks->push_back(std::move(c));
  }
  if (current) {
    // A record cut short (stintd died mid-write) is cut off, so that the
    // next append starts a whole record.
    if (pos < data.size() && truncate(path.c_str(), static_cast<off_t>(pos)) != 0)
      return StatusFromErrno("truncate " + path, errno);
    log->file_bytes = pos;
  }
  return Status::OK();
}

Status LogTails::Persist(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return StatusFromErrno("mkdir " + dir + " (the workers' logs)", errno);
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (d == nullptr) return StatusFromErrno("opendir " + dir, errno);
  // Jobs in the order they last wrote, so the overall cap drops the output
  // that is oldest, as it would have without the restart.
  std::map<int64_t, time_t> newest;  // job -> newest mtime of its files
  for (;;) {
    errno = 0;
    const dirent* e = readdir(d.get());
    if (e == nullptr) {
      if (errno != 0) return StatusFromErrno("readdir " + dir, errno);
      break;
    }
    const int64_t job = JobOfFile(e->d_name);
    if (job == 0) continue;
    struct stat st;
    const std::string path = dir + "/" + e->d_name;
    if (stat(path.c_str(), &st) != 0) return StatusFromErrno("stat " + path, errno);
    newest[job] = std::max(newest[job], st.st_mtime);
  }
  std::vector<std::pair<time_t, int64_t>> order;
  for (const auto& [job, mtime] : newest) order.emplace_back(mtime, job);
  std::sort(order.begin(), order.end());
  std::lock_guard<std::mutex> lock(mu_);
  dir_ = dir;
  for (const auto& [mtime, job] : order) {
    JobLog& log = jobs_[job];
    std::vector<LogChunk> chunks;
    STINT_RETURN_IF_ERROR(LoadFile(JobPath(job) + ".1", false, &log, &chunks));
    STINT_RETURN_IF_ERROR(LoadFile(JobPath(job), true, &log, &chunks));
    for (LogChunk& c : chunks) {
      log.bytes += c.text.size();
      bytes_ += c.text.size();
      order_.emplace_back(job, c.seq);
      log.chunks.push_back(std::move(c));
      Trim(&log);
    }
  }
  return Status::OK();
}

Result<int> LogTails::Prune(const std::function<bool(int64_t)>& keep,
                            std::chrono::seconds min_age) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dir_.empty()) return 0;
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir_.c_str()), closedir);
  if (d == nullptr) return StatusFromErrno("opendir " + dir_, errno);
  std::map<int64_t, time_t> newest;
  for (;;) {
    errno = 0;
    const dirent* e = readdir(d.get());
    if (e == nullptr) {
      if (errno != 0) return StatusFromErrno("readdir " + dir_, errno);
      break;
    }
    const int64_t job = JobOfFile(e->d_name);
    if (job == 0) continue;
    struct stat st;
    const std::string path = dir_ + "/" + e->d_name;
    if (stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return StatusFromErrno("stat " + path, errno);
    }
    newest[job] = std::max(newest[job], st.st_mtime);
  }
  const time_t now = std::time(nullptr);
  int pruned = 0;
  for (const auto& [job, mtime] : newest) {
    // A file's timestamp may be a second ahead of time(): the kernel may
    // stamp files from a finer clock than the coarse one time() reads.
    const time_t age = std::max<time_t>(0, now - mtime);
    if (age < min_age.count() || keep(job)) continue;
    for (const std::string& path : {JobPath(job), JobPath(job) + ".1"}) {
      if (unlink(path.c_str()) != 0 && errno != ENOENT)
        return StatusFromErrno("unlink " + path, errno);
    }
    auto it = jobs_.find(job);
    if (it != jobs_.end()) {
      // Numbering goes on (last_seq stays): a follower's cursor stays valid.
      bytes_ -= it->second.bytes;
      it->second.bytes = 0;
      it->second.chunks.clear();
      it->second.file_bytes = 0;
    }
    pruned++;
  }
  return pruned;
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
    if (!dir_.empty()) {
      Status written = WriteChunk(job_id, &log, log.chunks.back(), end);
      if (!written.ok() && !log.write_failed) {
        std::fprintf(stderr, "stintd: job %" PRId64 "'s output is kept in memory only: %s\n",
                     job_id, written.ToString().c_str());
      }
      log.write_failed = !written.ok();
    }
    log.bytes += text.size();
    bytes_ += text.size();
    order_.emplace_back(job_id, log.last_seq);
    Trim(&log);
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
