// Two workarounds for cpp-httplib (0.11), which keeps its sockets to itself:
// stintd finds them through /proc/self/fd instead.
//
// Stopping: cpp-httplib's stop() closes the listener, but listen() returns
// only once every connection's thread has, and a thread holding an idle
// keep-alive connection looks at the stopped server only after its
// keep-alive timeout (one mid-request only after its read timeout). With
// hundreds of agents and workers connected, HttpApi::Stop() would wait that
// long. Shutting down the reading side of each accepted connection wakes
// its thread at once: it reads end-of-stream and closes. The same ends a
// connection refused past the thread cap once its 503 is written.
//
// Bursts: cpp-httplib listens with a backlog of 5, so a burst of clients has
// its SYNs dropped and each waits out TCP's retransmit (1 s, 3 s, ...).
// Listening again on the bound socket raises the backlog.
//
// Linux only (/proc). Thread-safe: a descriptor closed or reused while a
// scan runs is skipped.
#ifndef STINT_TOOLS_STINTD_SERVER_HTTPLIB_SOCKETS_H_
#define STINT_TOOLS_STINTD_SERVER_HTTPLIB_SOCKETS_H_

#include <functional>
#include <string>

#include "stint/status.h"

namespace stint::stintd {

// Shuts down the reading side of every TCP connection this process accepted
// on `port` (the sockets whose local port is `port` and that have a peer;
// the listener has none) unless `spare(peer address, peer port)`; the peer
// address is written as cpp-httplib writes Request::remote_addr. Returns
// how many.
Result<int> ShutdownReadsOfAcceptedConnections(
    int port, const std::function<bool(const std::string&, int)>& spare);

// Raises the backlog of the socket listening on `port` to the system's
// limit (SOMAXCONN).
Status WidenListenBacklog(int port);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_HTTPLIB_SOCKETS_H_
