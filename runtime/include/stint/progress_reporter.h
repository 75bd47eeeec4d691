// Reports a worker's training progress to stintd: the step, the samples
// trained on so far and the training loss, sent with a heartbeat from a
// thread of its own once per heartbeat interval. A loop reports every step
// at the cost of a few atomic stores. stintd keeps each job's loss curve
// across segments and its pace per world size from these (the efficiency
// figures of `stintctl jobs show`).
//
// ResumableTraining (C++) and stint.Resumable (Python) make one from the
// environment stint-agent gives its workers and report the loss passed to
// their step boundary; a worker with a CoordinatorSession of its own uses
// the session's SetStep/ReportLoss instead.
#ifndef STINT_INCLUDE_STINT_PROGRESS_REPORTER_H_
#define STINT_INCLUDE_STINT_PROGRESS_REPORTER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "stint/coordinator_client.h"
#include "stint/status.h"

namespace stint {

class ProgressReporter {
 public:
  // Reports for the worker `client` acts for (REQUIRES: it has a
  // registration: Register() or UseRegistration()), every `interval`.
  static Result<std::unique_ptr<ProgressReporter>> Start(std::unique_ptr<CoordinatorClient> client,
                                                         std::chrono::milliseconds interval);
  // For the worker registration stint-agent put in the environment, at its
  // heartbeat interval; nullptr outside stint-agent (no registration there).
  static Result<std::unique_ptr<ProgressReporter>> FromEnvironment();
  // Sends what was reported since the last heartbeat, then stops.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // The newest finished step, its training loss (not finite: not sent) and
  // the samples trained on so far. Never blocks on the network.
  void Report(uint64_t step, std::optional<double> loss = std::nullopt,
              std::optional<uint64_t> samples = std::nullopt);
  // A durable checkpoint of `step` that took `seconds`; for an emergency one
  // also the seconds from the notice to durable and on its replicas (the
  // segment's figure in stintd). Sent on the reporter's thread at once (or
  // on the way out), never blocking; a newer report replaces one not sent.
  void ReportCheckpoint(uint64_t step, double seconds,
                        std::optional<double> notice_to_replicas_seconds = std::nullopt);
  // `step` is committed at `location` (CoordinatorClient::ReportStored).
  // Sent on the reporter's thread, never blocking; a newer report for the
  // same location replaces one not sent, and the destructor sends what is left.
  void ReportStored(const std::string& location, int tier, uint64_t step, uint64_t bytes);
  // The last heartbeat's error (OK once one succeeded): reporting is best
  // effort and never fails the training loop.
  Status last_error() const;
  // How often it heartbeats: a loop that must synchronise to read its loss
  // (a CUDA tensor) need not read it more often.
  std::chrono::milliseconds interval() const;

 private:
  class Impl;
  explicit ProgressReporter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stint

#endif  // STINT_INCLUDE_STINT_PROGRESS_REPORTER_H_
