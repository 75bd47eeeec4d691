// NewStoreChannel: the CommitChannel over a torch.distributed Store (store_channel.h).
#include "store_channel.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stint {
namespace python {

namespace py = pybind11;

namespace {

using Clock = std::chrono::steady_clock;

class PyStoreChannel final : public CommitChannel {
 public:
  // REQUIRES: the GIL held.
  explicit PyStoreChannel(py::object store)
      : store_(std::move(store)), description_(py::str(py::type::of(store_).attr("__name__"))) {
    try {
      read_store_ = store_.attr("clone")();
    } catch (py::error_already_set&) {
      read_store_ = py::object();
    }
    bounded_ = read_store_ && !read_store_.is(store_);
    if (!bounded_) read_store_ = store_;
  }
  ~PyStoreChannel() override {
    py::gil_scoped_acquire gil;
    store_ = py::object();
    read_store_ = py::object();
    wait_store_ = py::object();
  }

  Status Set(const std::string& key, const std::string& value) override {
    return Call("set " + key, [&] { store_.attr("set")(key, py::bytes(value)); });
  }
  Result<std::optional<std::string>> Get(const std::string& key) override {
    return GetBy(key, Clock::time_point::max());
  }
  Result<std::optional<std::string>> GetBy(const std::string& key,
                                           Clock::time_point deadline) override {
    std::lock_guard<std::mutex> lock(read_mu_);  // before the GIL, never after
    std::optional<std::string> out;
    Status s = Call("get " + key, [&] {
      // check() does not wait for the key; get() would, for the store's whole
      // timeout, were the key deleted in between: bounded by the deadline.
      if (!read_store_.attr("check")(KeyList({key})).cast<bool>()) return;
      BoundReadsBy(deadline);
      out = read_store_.attr("get")(key).cast<std::string>();
    });
    if (!s.ok()) return s;
    return out;
  }
  Result<std::optional<std::string>> WaitFor(const std::string& key,
                                             Clock::time_point deadline) override {
    // A store without a clone serves every read on one connection: a
    // blocking wait there would hold off the other readers, so it is polled.
    if (!bounded_) return CommitChannel::WaitFor(key, deadline);
    // The wait blocks its connection: it gets one of its own, the channel's
    // spare one unless another thread's wait holds it.
    std::unique_lock<std::mutex> spare(wait_mu_, std::try_to_lock);
    std::optional<std::string> out;
    Status s = Call("wait for " + key, [&] {
      if (spare.owns_lock() && !wait_store_) wait_store_ = store_.attr("clone")();
      py::object waiter = spare.owns_lock() ? wait_store_ : store_.attr("clone")();
      py::list keys = KeyList({key});
      const bool waited = deadline > Clock::now() && [&] {
        try {
          waiter.attr("wait")(keys, Timedelta(deadline));
          return true;
        } catch (py::error_already_set& e) {
          // Its timeout (TCPStore cancels the wait on the server first, so
          // the connection stays usable): not there by the deadline.
          if (std::string(e.what()).find("imeout") == std::string::npos) throw;
          return false;
        }
      }();
      if (!waited && !waiter.attr("check")(keys).cast<bool>()) return;
      waiter.attr("set_timeout")(Timedelta(deadline));
      out = waiter.attr("get")(key).cast<std::string>();
    });
    if (!s.ok()) {
      if (spare.owns_lock()) {
        py::gil_scoped_acquire gil;
        wait_store_ = py::object();  // a broken connection is not kept
      }
      return s;
    }
    return out;
  }
  Result<std::vector<std::optional<std::string>>> GetMany(const std::vector<std::string>& keys,
                                                          Clock::time_point deadline) override {
    std::vector<std::optional<std::string>> out;
    bool all = false;
    {
      std::lock_guard<std::mutex> lock(read_mu_);
      Status s = Call("get " + std::to_string(keys.size()) + " keys", [&] {
        // One round trip when every key is there; multi_get() would wait for
        // a missing one.
        py::list list = KeyList(keys);
        if (!py::hasattr(read_store_, "multi_get") ||
            !read_store_.attr("check")(list).cast<bool>()) {
          return;
        }
        BoundReadsBy(deadline);
        for (py::handle v : read_store_.attr("multi_get")(list)) {
          out.emplace_back(v.cast<std::string>());
        }
        all = true;
      });
      if (!s.ok()) return s;
    }
    if (all) return out;
    return CommitChannel::GetMany(keys, deadline);
  }
  Status Delete(const std::string& key) override {
    return Call("delete " + key, [&] { store_.attr("delete_key")(key); });
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    int64_t sum = 0;
    Status s = Call("add " + key, [&] { sum = store_.attr("add")(key, delta).cast<int64_t>(); });
    if (!s.ok()) return s;
    return sum;
  }
  std::string Describe() const override { return "torch.distributed " + description_; }

 private:
  template <typename F>
  Status Call(const std::string& what, F&& body) {
    if (!Py_IsInitialized() || PythonIsFinalizing()) {
      return Status::Unavailable(Describe() + ": " + what + ": the interpreter is shutting down");
    }
    py::gil_scoped_acquire gil;
    try {
      body();
      return Status::OK();
    } catch (py::error_already_set& e) {
      const bool timed_out = e.matches(PyExc_TimeoutError);
      return Status(timed_out ? Code::kDeadlineExceeded : Code::kUnavailable,
                    Describe() + ": " + what + ": " + e.what());
    } catch (const std::exception& e) {
      return Status::Unavailable(Describe() + ": " + what + ": " + e.what());
    }
  }
  static py::list KeyList(const std::vector<std::string>& keys) {
    py::list list;
    for (const std::string& k : keys) list.append(k);
    return list;
  }
  // A datetime.timedelta of what is left until `deadline` (at least 1 ms);
  // the store's own timeout for time_point::max(). REQUIRES: the GIL.
  py::object Timedelta(Clock::time_point deadline) {
    if (deadline == Clock::time_point::max()) return store_.attr("timeout");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return py::module_::import("datetime")
        .attr("timedelta")(py::arg("milliseconds") = std::max<int64_t>(1, left.count()));
  }
  // Sets the clone's timeout to what is left until `deadline`. REQUIRES: the GIL.
  void BoundReadsBy(Clock::time_point deadline) {
    if (bounded_) read_store_.attr("set_timeout")(Timedelta(deadline));
  }
  static bool PythonIsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
  }

  py::object store_;
  const std::string description_;
  std::mutex read_mu_;     // one read at a time: each sets the clone's timeout
  py::object read_store_;  // store_'s clone, or store_
  bool bounded_ = false;   // read_store_ is a clone
  std::mutex wait_mu_;     // guards wait_store_, held for a whole wait
  py::object wait_store_;  // another clone, made at the first wait
};

}  // namespace

std::unique_ptr<CommitChannel> NewStoreChannel(py::object store) {
  return std::make_unique<PyStoreChannel>(std::move(store));
}

}  // namespace python
}  // namespace stint
