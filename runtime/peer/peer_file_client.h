// PeerFileClient: reads checkpoint files from another node's PeerFileServer
// (peer_file_server.h), and OpenPeerFile, a RandomAccessFile over one of
// them, so a load reads a lost node's files from a peer like local ones.
//
// Errors name the URL and the file: kUnavailable when the peer cannot be
// reached (after 3 attempts), kNotFound for a file or step it lacks,
// kUnauthenticated for a refused token, kDataLoss for an answer that is
// short or not what was asked for, kInvalidArgument for a refused request.
//
// Thread-safe. Each call borrows a keep-alive connection from a small pool
// (a new one when all are busy), so concurrent reads do not queue behind
// each other on the client (the server serves PeerFileServerOptions::threads
// connections at once).
#ifndef STINT_RUNTIME_PEER_PEER_FILE_CLIENT_H_
#define STINT_RUNTIME_PEER_PEER_FILE_CLIENT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stint/env.h"
#include "stint/status.h"

namespace httplib {
class Client;
}

namespace stint {

class PeerFileClient {
 public:
  // `url`: http://host:port (a malformed one fails every call with
  // kInvalidArgument). `timeout` bounds connecting and each wait for the
  // peer within one attempt.
  PeerFileClient(std::string url, std::string token, std::chrono::milliseconds timeout);
  ~PeerFileClient();  // REQUIRES: no call in progress
  PeerFileClient(const PeerFileClient&) = delete;
  PeerFileClient& operator=(const PeerFileClient&) = delete;

  const std::string& url() const { return url_; }

  // The committed step directories ("step-00000010") the peer holds in its
  // root or its replica directory, each once, in step order.
  Result<std::vector<std::string>> ListSteps();
  // kNotFound when the peer has no such file.
  Result<uint64_t> FileSize(const std::string& step_dir, const std::string& file);
  // Reads exactly `n` bytes at `offset` into `dst`, fewer only at the end of
  // the file (0 at or past it). Attempts again, 3 in all, when the
  // connection fails; `dst` may hold part of a failed attempt's bytes.
  Result<size_t> ReadRange(const std::string& step_dir, const std::string& file, uint64_t offset,
                           size_t n, void* dst);

 private:
  struct Attempt;
  Result<std::unique_ptr<httplib::Client>> Acquire();
  void Release(std::unique_ptr<httplib::Client> client);
  // GET `path` with retries; the body into `body` (small answers only).
  Result<std::string> GetSmall(const std::string& path, const std::string& what);

  const std::string url_;
  const std::string token_;
  const std::chrono::milliseconds timeout_;
  std::string host_;
  int port_ = 0;
  Status url_status_;  // not OK: url_ is malformed

  std::mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;  // guarded by mu_
};

// A RandomAccessFile over `file` of `step_dir` on the client's peer: Size()
// asks once (at open: kNotFound when the peer lacks the file) and is cached;
// Read() is ReadRange(); direct_io() is false; path() is
// "<url>/<step_dir>/<file>".
Result<std::unique_ptr<RandomAccessFile>> OpenPeerFile(std::shared_ptr<PeerFileClient> client,
                                                       const std::string& step_dir,
                                                       const std::string& file);

}  // namespace stint

#endif  // STINT_RUNTIME_PEER_PEER_FILE_CLIENT_H_
