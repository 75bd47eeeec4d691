// PeerFileServer: serves a node's checkpoint files to the job's other nodes
// (issue 42: node-local roots, replicas on peers, loads that read a lost
// node's files from a peer). It runs inside the node's stint process, over
// HTTP, read-only:
//
//   GET /v1/steps                  {"steps": [{"dir": "step-00000010", "where": "root"}, ...]}
//                                  the committed step directories (those with a
//                                  MANIFEST.json) of root, then of replica_dir; a
//                                  step committed in both is listed twice
//   GET /v1/stat/<step-dir>/<file> {"size": n, "where": "root"|"replica"}, or 404
//   GET /v1/files/<step-dir>/<file>  with "Range: bytes=a-b" (or "bytes=a-"):
//                                  206 with exactly those bytes (b past the end
//                                  is cut to the end); 416 when a is at or past
//                                  the end; 400 without a Range or with several
//
// A file is served from root when root has it, else from replica_dir; files
// of a step directory without a manifest yet are served too (a replica may
// be copied before its commit). <step-dir> must be "step-" and digits, <file>
// one name (no '/', not "." or "..", no NUL; the path is checked after
// percent-decoding): anything else is refused with 400. Every request must
// carry "Authorization: Bearer <token>", else 401. Bytes are streamed through
// one bounded buffer per request, never a whole file in memory.
//
// Thread-safe. The destructor stops the server: transfers in progress end at
// their next buffer, idle keep-alive connections within about a second.
#ifndef STINT_RUNTIME_PEER_PEER_FILE_SERVER_H_
#define STINT_RUNTIME_PEER_PEER_FILE_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "stint/env.h"
#include "stint/status.h"

namespace stint {

struct PeerFileServerOptions {
  Env* env = nullptr;  // nullptr: Env::Default()
  // Serves <root>/step-<digits>/<file>.
  std::string root;
  // Empty: none. Else <replica_dir>/step-<digits>/<file> too, when root lacks it.
  std::string replica_dir;
  std::string bind_host = "0.0.0.0";
  int port = 0;  // 0: an ephemeral port (see port())
  // Required, non-empty: the bearer token every request must carry.
  std::string token;
  // Threads started with the server, each serving one connection at a
  // time; one more is added for each connection that would wait, up to 64
  // (idle keep-alive connections of clients' pools hold threads too).
  unsigned threads = 4;
  // Set: called before each buffer of an answer is read, so the serving
  // process's own foreground work (its saves) goes first.
  std::function<void()> yield;
};

class PeerFileServer {
 public:
  // Binds before returning (kIoError naming host:port when it cannot) and
  // serves from its own thread.
  static Result<std::unique_ptr<PeerFileServer>> Start(const PeerFileServerOptions& options);
  ~PeerFileServer();  // stops serving and joins the thread
  PeerFileServer(const PeerFileServer&) = delete;
  PeerFileServer& operator=(const PeerFileServer&) = delete;

  int port() const;

 private:
  struct Impl;
  explicit PeerFileServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stint

#endif  // STINT_RUNTIME_PEER_PEER_FILE_SERVER_H_
