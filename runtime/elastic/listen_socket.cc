#include "elastic/listen_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace stint::internal {

Result<ListenSocket> ListenSocket::Open(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), "0", &hints, &found);
  if (rc != 0)
    return Status::InvalidArgument("cannot resolve \"" + host + "\": " + gai_strerror(rc));
  Status last = Status::Unavailable("no address of \"" + host + "\" to listen on");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = Status(Code::kIoError, "socket: " + std::string(std::strerror(errno)), errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      last = Status(Code::kIoError, "listen on " + host + ": " + std::strerror(errno), errno);
      close(fd);
      continue;
    }
    const int port = bound.ss_family == AF_INET6
                         ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    freeaddrinfo(found);
    return ListenSocket(fd, port);
  }
  freeaddrinfo(found);
  return last;
}

ListenSocket& ListenSocket::operator=(ListenSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

ListenSocket::~ListenSocket() {
  if (fd_ >= 0) close(fd_);
}

int ListenSocket::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace stint::internal
