#include "c10d_commit_channel.h"

#include <exception>
#include <vector>

#include "torch_guard.h"

namespace stint {

C10dCommitChannel::C10dCommitChannel(c10::intrusive_ptr<c10d::Store> store, std::string description)
    : store_(std::move(store)), description_(std::move(description)) {}

Status C10dCommitChannel::Set(const std::string& key, const std::string& value) {
  try {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return Status::OK();
  } catch (const std::exception& e) {
    return StatusFromC10dError(e, description_ + ": set " + key);
  }
}

Result<std::optional<std::string>> C10dCommitChannel::Get(const std::string& key) {
  try {
    // check() never blocks; get() would wait for the store's whole timeout.
    if (!store_->check({key})) return std::optional<std::string>();
    std::vector<uint8_t> v = store_->get(key);
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
