#include "checkpoint/staging_watermark.h"

namespace stint {

void StagingWatermark::Advance(uint64_t filled) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (filled <= filled_) return;
    filled_ = filled < image_bytes_ ? filled : image_bytes_;
  }
  cv_.notify_all();
}

void StagingWatermark::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    filled_ = image_bytes_;
    finished_ = true;
    finished_at_ = Clock::now();
  }
  cv_.notify_all();
}

bool StagingWatermark::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void StagingWatermark::WaitFor(uint64_t to) {
  if (to > image_bytes_) to = image_bytes_;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return filled_ >= to; });
}

StagingWatermark::Clock::time_point StagingWatermark::WaitFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
  return finished_at_;
}

}  // namespace stint
