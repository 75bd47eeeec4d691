#include "c10d_commit_channel.h"

#include <algorithm>
#include <exception>
#include <vector>

#include "torch_guard.h"

namespace stint {

namespace {

// store's clone, or null when it cannot be cloned.
c10::intrusive_ptr<c10d::Store> CloneOrNull(const c10::intrusive_ptr<c10d::Store>& store) {
  try {
    auto clone = store->clone();
    // A clone that is the store itself (HashStore) shares its timeout.
    return clone.get() == store.get() ? c10::intrusive_ptr<c10d::Store>() : clone;
  } catch (const std::exception&) {
    return c10::intrusive_ptr<c10d::Store>();
  }
}

}  // namespace

C10dCommitChannel::C10dCommitChannel(c10::intrusive_ptr<c10d::Store> store, std::string description)
    : store_(std::move(store)),
      description_(std::move(description)),
      read_store_(CloneOrNull(store_)),
      bounded_(read_store_) {
  if (!bounded_) read_store_ = store_;
}

Status C10dCommitChannel::Set(const std::string& key, const std::string& value) {
  try {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return Status::OK();
  } catch (const std::exception& e) {
    return StatusFromC10dError(e, description_ + ": set " + key);
  }
}

Result<std::optional<std::string>> C10dCommitChannel::Get(const std::string& key) {
  return GetBy(key, std::chrono::steady_clock::time_point::max());
}

void C10dCommitChannel::BoundReadsBy(std::chrono::steady_clock::time_point deadline) {
  if (!bounded_) return;
  // A read of keys check() found is one round trip; the store's timeout
  // bounds that round trip too (torch 2.15 fails a 1 ms get of a present
  // key), so even past the caller's deadline it gets a round trip's worth
  // with a wide margin. Only a key deleted in between is waited for, and
  // only this long past the deadline.
  constexpr std::chrono::milliseconds kRoundTrip{2000};
  read_store_->setTimeout(std::max(TimeLeft(deadline), kRoundTrip));
}

std::chrono::milliseconds C10dCommitChannel::TimeLeft(
    std::chrono::steady_clock::time_point deadline) const {
  if (deadline == std::chrono::steady_clock::time_point::max()) return store_->getTimeout();
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                               std::chrono::steady_clock::now());
}

Result<std::optional<std::string>> C10dCommitChannel::GetBy(
    const std::string& key, std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(read_mu_);
  try {
    // check() does not wait for the key; get() would, for the store's whole
    // timeout, were the key deleted in between: bounded by the deadline.
    if (!read_store_->check({key})) return std::optional<std::string>();
    BoundReadsBy(deadline);
    std::vector<uint8_t> v = read_store_->get(key);
    return std::optional<std::string>(std::string(v.begin(), v.end()));
  } catch (const std::exception& e) {
    return StatusFromC10dError(e, description_ + ": get " + key);
  }
}

Result<std::optional<std::string>> C10dCommitChannel::WaitFor(
    const std::string& key, std::chrono::steady_clock::time_point deadline) {
  // A store that cannot be cloned serves every read of this channel on one
  // connection: a blocking wait there would hold off the other ranks'
  // reads (threads sharing the channel), so it is polled.
  if (!bounded_) return CommitChannel::WaitFor(key, deadline);
  // The wait blocks its connection: it gets a connection of its own, the
  // channel's spare one unless another thread's wait holds it.
  std::unique_lock<std::mutex> spare(wait_mu_, std::try_to_lock);
  c10::intrusive_ptr<c10d::Store> waiter;
  try {
    if (spare.owns_lock() && !wait_store_) wait_store_ = store_->clone();
    waiter = spare.owns_lock() ? wait_store_ : store_->clone();
    const std::chrono::milliseconds left = TimeLeft(deadline);
    if (left.count() <= 0) {
      if (!waiter->check({key})) return std::optional<std::string>();
    } else {
      try {
        waiter->wait({key}, left);
      } catch (const std::exception& e) {
        // The store's wait ends in an exception at its timeout (TCPStore
        // cancels the wait on the server first, so the connection stays
        // usable): then the key is not there by the deadline.
        if (StatusFromC10dError(e, "").code() != Code::kDeadlineExceeded) throw;
        if (!waiter->check({key})) return std::optional<std::string>();
      }
    }
    waiter->setTimeout(std::max(TimeLeft(deadline), std::chrono::milliseconds(1)));
    std::vector<uint8_t> v = waiter->get(key);
    return std::optional<std::string>(std::string(v.begin(), v.end()));
  } catch (const std::exception& e) {
    if (spare.owns_lock()) wait_store_.reset();  // a broken connection is not kept
    return StatusFromC10dError(e, description_ + ": wait for " + key);
  }
}

Result<std::vector<std::optional<std::string>>> C10dCommitChannel::GetMany(
    const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(read_mu_);
    try {
      // When every key is there (the common case: the ranks counted
      // themselves in), one round trip; multiGet() would wait for any missing.
      if (read_store_->check(keys)) {
        BoundReadsBy(deadline);
        std::vector<std::vector<uint8_t>> values = read_store_->multiGet(keys);
        std::vector<std::optional<std::string>> out;
        out.reserve(values.size());
        for (auto& v : values) out.emplace_back(std::string(v.begin(), v.end()));
        return out;
      }
    } catch (const std::exception& e) {
      return StatusFromC10dError(e, description_ + ": get " + std::to_string(keys.size()) +
                                        " keys from " + (keys.empty() ? "" : keys[0]));
    }
  }
  return CommitChannel::GetMany(keys, deadline);
}

Status C10dCommitChannel::Delete(const std::string& key) {
  try {
    store_->deleteKey(key);
    return Status::OK();
  } catch (const std::exception& e) {
    return StatusFromC10dError(e, description_ + ": delete " + key);
  }
}

Result<int64_t> C10dCommitChannel::Add(const std::string& key, int64_t delta) {
  try {
    return store_->add(key, delta);
  } catch (const std::exception& e) {
    return StatusFromC10dError(e, description_ + ": add " + key);
  }
}

}  // namespace stint
