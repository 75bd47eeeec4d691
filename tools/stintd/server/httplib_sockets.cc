#include "stintd/server/httplib_sockets.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

namespace stint::stintd {

Result<int> ShutdownReadsOfAcceptedConnections(
    int port, const std::function<bool(const std::string&, int)>& spare) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
  if (dir == nullptr) return StatusFromErrno("opendir /proc/self/fd", errno);
  auto port_of = [](const sockaddr_storage& a) {
    if (a.ss_family == AF_INET)
      return int(ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port));
    if (a.ss_family == AF_INET6)
      return int(ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port));
    return -1;
  };
  int count = 0;
  for (;;) {
    errno = 0;
    const dirent* entry = readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return StatusFromErrno("readdir /proc/self/fd", errno);
      return count;
    }
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir.get())) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    if (port_of(addr) != port) continue;
    len = sizeof(addr);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    // The peer as cpp-httplib writes it into Request::remote_addr.
    char host[NI_MAXHOST] = {};
    if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) == 0 &&
        spare(host, port_of(addr))) {
      continue;
    }
    // ENOTCONN: the peer went meanwhile, nothing left to wake.
    if (shutdown(static_cast<int>(fd), SHUT_RD) == 0) count++;
  }
}

Status WidenListenBacklog(int port) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
  if (dir == nullptr) return StatusFromErrno("opendir /proc/self/fd", errno);
  for (;;) {
    errno = 0;
    const dirent* entry = readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return StatusFromErrno("readdir /proc/self/fd", errno);
      return Status::NotFound("no listening socket on port " + std::to_string(port));
    }
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir.get())) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
        listening == 0) {
      continue;
    }
    sockaddr_storage addr{};
    len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    const int bound = addr.ss_family == AF_INET
                          ? ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6
                          ? ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port)
                          : -1;
    if (bound != port) continue;
    if (listen(static_cast<int>(fd), SOMAXCONN) != 0) return StatusFromErrno("listen", errno);
    return Status::OK();
  }
}

}  // namespace stint::stintd
