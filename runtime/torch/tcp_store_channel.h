// ConnectTcpStore: a commit channel (stint/commit_channel.h) over a c10d
// TCPStore, for a C++ job of several processes that has no torch process
// group to take a store from, and for tools. One process serves the store
// (serve = true; port 0 picks a free one), the others connect to it.
//
//   stint::TcpStoreOptions so;  so.host = master;  so.port = 29600;  so.serve = rank == 0;
//   auto channel = stint::ConnectTcpStore(so).value();
//   options.commit_channel = channel.get();
//
// This header includes no LibTorch header: code that only needs the channel
// compiles without them and links stint::torch.
#ifndef STINT_TORCH_TCP_STORE_CHANNEL_H_
#define STINT_TORCH_TCP_STORE_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "stint/commit_channel.h"
#include "stint/status.h"

namespace stint {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // with serve, 0: any free port (see *served_port)
  bool serve = false;
  // How long connecting waits for the server, and the store's own timeout.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// The channel, owning its store connection (and the server, when it serves).
// `served_port`, when given, receives the port the store listens on.
// kUnavailable / kDeadlineExceeded naming host:port when it cannot connect or
// bind.
Result<std::unique_ptr<CommitChannel>> ConnectTcpStore(const TcpStoreOptions& options,
                                                       uint16_t* served_port = nullptr);

}  // namespace stint

#endif  // STINT_TORCH_TCP_STORE_CHANNEL_H_
