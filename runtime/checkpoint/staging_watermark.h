// StagingWatermark: how much of a staging image, counted from its start,
// Save()'s own copies have filled. The persist thread writes the first
// chunks of a save while Save() is still copying the later ones, instead of
// waiting for the whole snapshot: a save reaches disk in about the time of
// its writes rather than of its copies plus its writes.
//
// Thread-safe: one thread advances it (Save()), another waits on it.
#ifndef STINT_RUNTIME_CHECKPOINT_STAGING_WATERMARK_H_
#define STINT_RUNTIME_CHECKPOINT_STAGING_WATERMARK_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace stint {

class StagingWatermark {
 public:
  using Clock = std::chrono::steady_clock;

  // An image of `image_bytes`, nothing of it filled yet.
  explicit StagingWatermark(uint64_t image_bytes) : image_bytes_(image_bytes) {}
  StagingWatermark(const StagingWatermark&) = delete;
  StagingWatermark& operator=(const StagingWatermark&) = delete;

  uint64_t image_bytes() const { return image_bytes_; }
  // Bytes [0, filled) are written; never moves back.
  void Advance(uint64_t filled);
  // The whole image is written; records when.
  void Finish();
  // Blocks until bytes [0, min(to, image_bytes)) are written. No deadline:
  // Save() is copying on its own thread and finishes in memcpy time.
  void WaitFor(uint64_t to);
  bool finished() const;
  // Blocks until Finish(); when it was called.
  Clock::time_point WaitFinished();

 private:
  const uint64_t image_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t filled_ = 0;            // guarded by mu_
  bool finished_ = false;          // guarded by mu_
  Clock::time_point finished_at_;  // guarded by mu_
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_STAGING_WATERMARK_H_
