// The newest progress a worker reported (step, samples, training loss and
// the step it belongs to), written by the training loop and taken by the
// thread that heartbeats. One uncontended lock per report.
#ifndef STINT_RUNTIME_COORD_PROGRESS_CELL_H_
#define STINT_RUNTIME_COORD_PROGRESS_CELL_H_

#include <cmath>
#include <cstdint>
#include <mutex>

#include "stint/coordinator_client.h"

namespace stint::internal {

class ProgressCell {
 public:
  void SetStep(uint64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    progress_.step = step;
  }
  void SetSamples(uint64_t samples) {
    std::lock_guard<std::mutex> lock(mu_);
    progress_.samples = samples;
  }
  // The loss of `step` (or of the newest step set); one that is not finite
  // is dropped: JSON has no NaN, and a diverged run shows as the curve's end.
  void SetLoss(double loss, std::optional<uint64_t> step = std::nullopt) {
    if (!std::isfinite(loss)) return;
    std::lock_guard<std::mutex> lock(mu_);
    progress_.loss = loss;
    progress_.loss_step = step ? step : progress_.step;
  }
  // What the next heartbeat sends; a loss is sent once.
  WorkerProgress Take() {
    std::lock_guard<std::mutex> lock(mu_);
    WorkerProgress p = progress_;
    progress_.loss.reset();
    progress_.loss_step.reset();
    return p;
  }

 private:
  std::mutex mu_;
  WorkerProgress progress_;
};

}  // namespace stint::internal

#endif  // STINT_RUNTIME_COORD_PROGRESS_CELL_H_
