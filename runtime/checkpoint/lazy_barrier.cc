#include "checkpoint/lazy_barrier.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace stint {

LazyBarrier::LazyBarrier(ThreadPool* pool, DeviceCopier* copier,
                         std::chrono::milliseconds copy_timeout)
    : copier_(copier), copy_timeout_(copy_timeout), lazy_(pool) {}

namespace {

// Device copies are grouped into tickets of about this many bytes, so the
// persist thread writes a group's chunks while later groups still copy.
constexpr uint64_t kDeviceGroupBytes = 64u << 20;

// `copies` (consecutive in the image) cut into groups of kDeviceGroupBytes.
std::vector<std::vector<DeviceCopy>> GroupDeviceCopies(const std::vector<DeviceCopy>& copies) {
  std::vector<std::vector<DeviceCopy>> groups;
  uint64_t bytes = kDeviceGroupBytes;
  for (const DeviceCopy& c : copies) {
    if (bytes >= kDeviceGroupBytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(c);
    bytes += c.bytes;
  }
  return groups;
}

}  // namespace

Result<std::shared_ptr<SnapshotProgress>> LazyBarrier::Start(uint64_t step,
                                                             Clock::time_point saved_at,
                                                             char* image, StagingCopies* copies,
                                                             bool* image_still_written) {
  const WriteBarrier order[2] = {WriteBarrier::kForward, WriteBarrier::kOptimizerStep};
  bool host[2];
  std::vector<std::vector<DeviceCopy>> groups[2];
  int device_tickets = 0;
  for (WriteBarrier w : order) {
    host[int(w)] = !copies->later[int(w)].empty();
    groups[int(w)] = GroupDeviceCopies(copies->device[int(w)]);
    device_tickets += int(groups[int(w)].size());
  }
  if (!host[0] && !host[1] && device_tickets == 0) return std::shared_ptr<SnapshotProgress>();
  auto progress = std::make_shared<SnapshotProgress>(step, saved_at, host, device_tickets);
  std::vector<uint64_t> started;
  for (WriteBarrier w : order) {
    for (const auto& group : groups[int(w)]) {
      auto ticket = copier_->CopyToHostAsync(group, [progress] { progress->DeviceTicketDone(); });
      if (!ticket.ok()) {
        for (uint64_t t : started) {  // they write `image`
          Status waited = WaitTicket(t, saved_at + copy_timeout_);
          if (waited.code() == Code::kDeadlineExceeded) *image_still_written = true;
        }
        return ticket.status().WithContext("save step " + std::to_string(step));
      }
      started.push_back(*ticket);
      std::set<std::pair<int, void*>> streams;
      uint64_t begin = UINT64_MAX;
      for (const DeviceCopy& c : group) {
        streams.emplace(c.device, c.stream);
        begin = std::min(begin, uint64_t(static_cast<char*>(c.dst) - image));
      }
      progress->AddDeviceTicket(w, *ticket, begin, {streams.begin(), streams.end()});
    }
  }
  if (host[0] || host[1]) {
    LazyCopyThread::Task task{image, {}, copies->unchanged, progress};
    for (WriteBarrier w : order) task.pieces[int(w)] = std::move(copies->later[int(w)]);
    lazy_.Enqueue(std::move(task));
  }
  return progress;
}

void LazyBarrier::Track(const std::shared_ptr<SnapshotProgress>& progress,
                        std::shared_ptr<const void> owner) {
  progress->set_owner(std::move(owner));
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  in_flight_.push_back(progress);
}

Status LazyBarrier::Wait(SnapshotProgress* p, Clock::time_point saved_at, bool* still_written) {
  const Clock::time_point deadline = saved_at + copy_timeout_;
  Status first;
  if (!p->WaitHost(WriteBarrier::kOptimizerStep, deadline)) {
    first = Status::DeadlineExceeded("lazy host copies not done " +
                                     std::to_string(copy_timeout_.count()) +
                                     " ms after Save() (CheckpointOptions.copy_timeout)");
    *still_written = true;
  }
  for (size_t i = 0; i < p->device_groups().size(); ++i) {
    Status s = WaitGroup(p, i, deadline);
    if (first.ok() && !s.ok()) first = s;
    if (s.code() == Code::kDeadlineExceeded) *still_written = true;
  }
  return first;
}

Status LazyBarrier::WaitStagedUpTo(SnapshotProgress* p, uint64_t to, Clock::time_point saved_at,
                                   size_t* next_group) {
  const Clock::time_point deadline = saved_at + copy_timeout_;
  if (*next_group == 0 && !p->WaitHost(WriteBarrier::kOptimizerStep, deadline)) {
    return Status::DeadlineExceeded("lazy host copies not done " +
                                    std::to_string(copy_timeout_.count()) +
                                    " ms after Save() (CheckpointOptions.copy_timeout)");
  }
  const auto& groups = p->device_groups();
  for (; *next_group < groups.size() && groups[*next_group].begin < to; ++*next_group) {
    STINT_RETURN_IF_ERROR(WaitGroup(p, *next_group, deadline));
  }
  return Status::OK();
}

Status LazyBarrier::WaitGroup(SnapshotProgress* p, size_t i, Clock::time_point deadline) {
  const SnapshotProgress::DeviceGroup& group = p->device_groups()[i];
  if (group.retired) return group.result;
  Status s = WaitTicket(group.ticket, deadline);
  if (s.code() != Code::kDeadlineExceeded) p->RetireDeviceGroup(i, s);  // it answers only once
  return s;
}

std::vector<std::shared_ptr<SnapshotProgress>> LazyBarrier::Pending() {
  std::vector<std::shared_ptr<SnapshotProgress>> done, left;
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    for (auto& p : in_flight_) (p->staged_ready() ? done : left).push_back(p);
    in_flight_ = left;
  }
  for (auto& p : done) p->TakeOwner().reset();
  return left;
}

Status LazyBarrier::BeforeWrite(WriteBarrier barrier, std::chrono::milliseconds timeout,
                                const Checkpointer::WriterStream& writer_stream) {
  const auto deadline = Clock::now() + timeout;
  const bool forward = barrier == WriteBarrier::kForward;
  for (const auto& p : Pending()) {
    if (!p->WaitHost(barrier, deadline)) {
      return Status::DeadlineExceeded("lazy barrier: host copies of step " +
                                      std::to_string(p->step()) + " still running after " +
                                      std::to_string(timeout.count()) + " ms");
    }
    // kForward: the forward pass writes the kForward shards on the streams
    // they were saved from. kOptimizerStep: every stream, every copy.
    std::vector<WriteBarrier> classes = {WriteBarrier::kForward};
    if (!forward) classes.push_back(WriteBarrier::kOptimizerStep);
    std::set<std::pair<int, void*>> streams;
    for (WriteBarrier w : classes) {
      for (const auto& [device, saved_from] : p->device_streams(w)) {
        void* stream = saved_from;
        if (writer_stream) {
          Result<void*> writer = writer_stream(device);
          if (!writer.ok()) {
            return writer.status().WithContext("lazy barrier: the writing stream of device " +
                                               std::to_string(device));
          }
          stream = *writer;
        }
        streams.insert({device, stream});
      }
    }
    for (const SnapshotProgress::DeviceGroup& g : p->device_groups()) {
      if (forward && g.when != WriteBarrier::kForward) continue;
      for (const auto& [device, stream] : streams) {
        STINT_RETURN_IF_ERROR(copier_->OrderAfter(g.ticket, device, stream)
                                  .WithContext("lazy barrier, step " + std::to_string(p->step())));
      }
    }
  }
  return Status::OK();
}

Status LazyBarrier::WaitStaged(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const auto& p : Pending()) {
    if (p->staged().wait_until(deadline) != std::future_status::ready) {
      return Status::DeadlineExceeded("copies of step " + std::to_string(p->step()) +
                                      " still running after " + std::to_string(timeout.count()) +
                                      " ms");
    }
  }
  Pending();  // releases what they borrowed
  return Status::OK();
}

void LazyBarrier::Clear() {
  std::vector<std::shared_ptr<SnapshotProgress>> dropped;
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    dropped.swap(in_flight_);
  }
}

Status LazyBarrier::WaitTicket(uint64_t ticket, Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  Status s = copier_->Wait(ticket, std::max(left, std::chrono::milliseconds(0)));
  if (s.code() != Code::kDeadlineExceeded) return s;
  return Status::DeadlineExceeded(
      "device-to-host copies not done " + std::to_string(copy_timeout_.count()) +
      " ms after Save() (CheckpointOptions.copy_timeout): " + s.message());
}

}  // namespace stint
