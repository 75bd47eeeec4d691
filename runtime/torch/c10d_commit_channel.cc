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

Result<std::optional<std::string>> C10dCommitChannel::GetBy(
    const std::string& key, std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(read_mu_);
  try {
    // check() does not wait for the key; get() would, for the store's whole
    // timeout, were the key deleted in between: bounded by the deadline.
    if (!read_store_->check({key})) return std::optional<std::string>();
    if (bounded_) {
      auto now = std::chrono::steady_clock::now();
      auto left = deadline == std::chrono::steady_clock::time_point::max()
                      ? store_->getTimeout()
                      : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      read_store_->setTimeout(std::max(left, std::chrono::milliseconds(1)));
    }
    std::vector<uint8_t> v = read_store_->get(key);
    return std::optional<std::string>(std::string(v.begin(), v.end()));
  } catch (const std::exception& e) {
    return StatusFromC10dError(e, description_ + ": get " + key);
  }
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
