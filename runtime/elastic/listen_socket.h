// A listening TCP socket on an ephemeral port, bound before the rendezvous
// so the port advertised is one this process already holds.
#ifndef STINT_RUNTIME_ELASTIC_LISTEN_SOCKET_H_
#define STINT_RUNTIME_ELASTIC_LISTEN_SOCKET_H_

#include <string>

#include "stint/status.h"

namespace stint::internal {

class ListenSocket {
 public:
  // Binds `host` (an IPv4/IPv6 literal or a name) on port 0 and listens.
  static Result<ListenSocket> Open(const std::string& host);
  ListenSocket(ListenSocket&& other) noexcept : fd_(other.fd_), port_(other.port_) {
    other.fd_ = -1;
  }
  ListenSocket& operator=(ListenSocket&& other) noexcept;
  ~ListenSocket();

  int port() const { return port_; }
  // Gives the fd to the caller, who closes it.
  int Release();

 private:
  ListenSocket(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

}  // namespace stint::internal

#endif  // STINT_RUNTIME_ELASTIC_LISTEN_SOCKET_H_
