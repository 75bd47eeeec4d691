// C10dCommitChannel: the commit channel of a multi-rank save (see
// stint/commit_channel.h) over a c10d Store, the key-value store every
// torch.distributed job already has: the TCPStore torchrun or
// init_process_group made, a FileStore on a shared path, or a PrefixStore
// over either.
//
//   auto store = c10::make_intrusive<c10d::TCPStore>(host, opts);
//   stint::C10dCommitChannel channel(store);
//   options.rank = rank; options.world_size = world; options.commit_channel = &channel;
//
// Store exceptions become Status (kUnavailable; kDeadlineExceeded for the
// store's own timeouts). Reads go through a clone of the store (its own
// connection), whose timeout GetBy() sets to what is left of the caller's
// deadline, so no read outlasts it (a store that cannot be cloned is read
// directly, bounded by its own timeout). WaitFor() is the store's wait() on
// a connection of its own (a store that cannot be cloned is polled instead),
// GetMany() its multiGet(). Thread-safe: ranks in threads may share one.
#ifndef STINT_TORCH_C10D_COMMIT_CHANNEL_H_
#define STINT_TORCH_C10D_COMMIT_CHANNEL_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <mutex>
#include <string>

#include "stint/commit_channel.h"

namespace stint {

class C10dCommitChannel final : public CommitChannel {
 public:
  // `description` names the store in errors. Default: "c10d store".
  explicit C10dCommitChannel(c10::intrusive_ptr<c10d::Store> store,
                             std::string description = "c10d store");

  Status Set(const std::string& key, const std::string& value) override;
  Result<std::optional<std::string>> Get(const std::string& key) override;
  Result<std::optional<std::string>> GetBy(const std::string& key,
                                           std::chrono::steady_clock::time_point deadline) override;
  Result<std::optional<std::string>> WaitFor(
      const std::string& key, std::chrono::steady_clock::time_point deadline) override;
  Result<std::vector<std::optional<std::string>>> GetMany(
      const std::vector<std::string>& keys,
      std::chrono::steady_clock::time_point deadline) override;
  Status Delete(const std::string& key) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;
  std::string Describe() const override { return description_; }

 private:
  // Sets read_store_'s timeout to what is left until `deadline` (a clone only).
  void BoundReadsBy(std::chrono::steady_clock::time_point deadline);
  // Until `deadline`; the store's own timeout for time_point::max().
  std::chrono::milliseconds TimeLeft(std::chrono::steady_clock::time_point deadline) const;

  c10::intrusive_ptr<c10d::Store> store_;
  const std::string description_;
  std::mutex read_mu_;  // one read at a time: each sets the clone's timeout
  c10::intrusive_ptr<c10d::Store> read_store_;  // store_'s clone, or store_
  const bool bounded_;                          // read_store_ is a clone
  std::mutex wait_mu_;                          // guards wait_store_, held for a whole wait
  c10::intrusive_ptr<c10d::Store> wait_store_;  // another clone, made at the first wait
};

}  // namespace stint

#endif  // STINT_TORCH_C10D_COMMIT_CHANNEL_H_
