#include "tcp_store_channel.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <exception>

#include "c10d_commit_channel.h"
#include "torch_guard.h"

namespace stint {

Result<std::unique_ptr<CommitChannel>> ConnectTcpStore(const TcpStoreOptions& options,
                                                       uint16_t* served_port) {
  const std::string where = options.host + ":" + std::to_string(options.port);
  try {
    c10d::TCPStoreOptions so;
    so.port = options.port;
    so.isServer = options.serve;
    so.waitWorkers = false;
    so.timeout = options.timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(options.host, so);
    if (served_port != nullptr) *served_port = store->getPort();
    return std::unique_ptr<CommitChannel>(std::make_unique<C10dCommitChannel>(
        store, "c10d TCPStore at " + options.host + ":" + std::to_string(store->getPort())));
  } catch (const std::exception& e) {
    return StatusFromC10dError(
        e, (options.serve ? "serving a TCPStore at " : "connecting to the TCPStore at ") + where);
  }
}

}  // namespace stint
