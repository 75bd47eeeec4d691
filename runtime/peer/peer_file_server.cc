#include "peer/peer_file_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "base/background_thread.h"
#include "base/strings.h"

namespace stint {
namespace {

using Json = nlohmann::json;

constexpr char kManifest[] = "MANIFEST.json";  // format/manifest.h's kManifestName
// One buffer per transfer: enough to keep loopback and NICs busy, small
// enough that a few concurrent peers cost a few MiB.
constexpr size_t kTransferBuffer = size_t{1} << 20;
// Connections served at once, at most (ConnectionThreads): a job's peers'
// readers, with room to spare; beyond it connections wait their turn.
constexpr size_t kMaxConnectionThreads = 64;


bool ValidStepDir(const std::string& s) {
  return s.size() > 5 && s.compare(0, 5, "step-") == 0 && AllDigits(s.substr(5));
}

// One path component that names a file inside the step directory and
// nothing else.
bool ValidFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

// Every byte is compared whatever the first difference, so the time taken
// says nothing about how much of a guess was right.
bool SameSecret(const std::string& got, const std::string& want) {
  unsigned char diff = got.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(want[i]) ^
            static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  }
  return diff == 0;
}


// "bytes=a-b" or "bytes=a-": one range with a start. Suffix ranges
// ("bytes=-n") and lists are refused: a peer always knows what it wants.
bool ParseRange(const std::string& header, uint64_t* first, std::optional<uint64_t>* last) {
  constexpr char kUnit[] = "bytes=";
  if (header.compare(0, sizeof(kUnit) - 1, kUnit) != 0) return false;
  const std::string spec = header.substr(sizeof(kUnit) - 1);
  const size_t dash = spec.find('-');
  if (dash == std::string::npos) return false;
  if (!ParseDecimalU64(spec.substr(0, dash), first)) return false;
  const std::string tail = spec.substr(dash + 1);
  if (tail.empty()) {
    last->reset();
    return true;
  }
  uint64_t l = 0;
  if (!ParseDecimalU64(tail, &l) || l < *first) return false;
  *last = l;
  return true;
}

void Reply(httplib::Response& res, int status, const char* code, const std::string& message) {
  res.status = status;
  Json j = {{"error", {{"code", code}, {"message", message}}}};
  res.set_content(j.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void ReplyStatus(httplib::Response& res, const Status& s) {
  switch (s.code()) {
    case Code::kNotFound:
      return Reply(res, 404, "NOT_FOUND", s.message());
    case Code::kInvalidArgument:
      return Reply(res, 400, "INVALID_ARGUMENT", s.message());
    default:
      return Reply(res, 500, CodeName(s.code()), s.message());
  }
}

// Ranges are answered by HandleFile alone. httplib (0.11) applies a
// request's Range to whatever answer it gets: it cuts error bodies to the
// range, and asks a content provider for bytes past the file's end when
// the range ends beyond it. Called first for every request; the Request is
// httplib's own non-const object, handed to handlers as const. The Range
// header itself stays.
void TakeOverRanges(const httplib::Request& req) {
  const_cast<httplib::Request&>(req).ranges.clear();
}

// A transfer's open file and buffer, alive as long as httplib's provider.
struct Transfer {
  std::unique_ptr<RandomAccessFile> file;
  std::vector<char> buffer;
  const std::atomic<bool>* stopping = nullptr;
};

// httplib serves a connection on one thread for as long as it lives, and
// its ThreadPool queues a connection that finds every thread taken. A
// client's pool keeps idle keep-alive connections; with a fixed pool they
// would hold every thread while the connection that carries a request
// waits (a second at a time, the keep-alive timeout). So this queue starts
// `base` threads and adds one whenever a connection would wait, up to `max`.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  ConnectionThreads(size_t base, size_t max) : max_(std::max(base, max)) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < base; ++i) AddThreadLocked();
  }
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(fn));
      if (idle_ < jobs_.size() && threads_.size() < max_) AddThreadLocked();
    }
    cv_.notify_one();
  }

  // Runs the jobs still queued (httplib closes their connections: the
  // server has stopped), then joins every thread.
  void shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
  }

 private:
  void AddThreadLocked() {
    threads_.emplace_back([this] { Work(); });
  }
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      cv_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // shutdown_, nothing left
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;  // threads waiting for a job
  bool shutdown_ = false;
};

}  // namespace

struct PeerFileServer::Impl {
  explicit Impl(const PeerFileServerOptions& o)
      : options(o), env(o.env != nullptr ? o.env : Env::Default()) {}

  void InstallRoutes();
  void HandleSteps(httplib::Response& res);
  void HandleStat(const std::string& step, const std::string& file, httplib::Response& res);
  void HandleFile(const httplib::Request& req, const std::string& step, const std::string& file,
                  httplib::Response& res);

  struct Located {
    std::string path;
    const char* where;
  };
  // The file's copy in root, else in replica_dir; kNotFound in neither.
  Result<Located> Locate(const std::string& step, const std::string& file);

  const PeerFileServerOptions options;
  Env* const env;
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> listen_returned{false};
};

Result<PeerFileServer::Impl::Located> PeerFileServer::Impl::Locate(const std::string& step,
                                                                    const std::string& file) {
  const std::pair<const std::string*, const char*> places[] = {{&options.root, "root"},
                                                               {&options.replica_dir, "replica"}};
  for (const auto& [dir, where] : places) {
    if (dir->empty()) continue;
    std::string path = *dir + "/" + step + "/" + file;
    if (env->FileExists(path) && !env->IsDirectory(path)) return Located{std::move(path), where};
  }
  return Status::NotFound(step + "/" + file + ": not in " + options.root +
                          (options.replica_dir.empty() ? "" : " nor in " + options.replica_dir));
}

void PeerFileServer::Impl::HandleSteps(httplib::Response& res) {
  Json steps = Json::array();
  const std::pair<const std::string*, const char*> places[] = {{&options.root, "root"},
                                                               {&options.replica_dir, "replica"}};
  for (const auto& [dir, where] : places) {
    if (dir->empty()) continue;
    Result<std::vector<std::string>> children = env->GetChildren(*dir);
    if (!children.ok()) {
      // A root not made yet holds nothing; any other failure is the server's.
      if (children.status().code() == Code::kNotFound) continue;
      return ReplyStatus(res, children.status().WithContext("listing " + *dir));
    }
    std::vector<std::pair<uint64_t, std::string>> committed;
    for (const std::string& name : *children) {
      uint64_t step = 0;
      if (!ValidStepDir(name) || !ParseDecimalU64(name.substr(5), &step)) continue;
      if (!env->FileExists(*dir + "/" + name + "/" + kManifest)) continue;
      committed.emplace_back(step, name);
    }
    std::sort(committed.begin(), committed.end());
    for (const auto& [step, name] : committed) steps.push_back({{"dir", name}, {"where", where}});
  }
  res.set_content(Json{{"steps", std::move(steps)}}.dump(), "application/json");
}

void PeerFileServer::Impl::HandleStat(const std::string& step, const std::string& file,
                                      httplib::Response& res) {
  Result<Located> located = Locate(step, file);
  if (!located.ok()) return ReplyStatus(res, located.status());
  Result<std::unique_ptr<RandomAccessFile>> f =
      env->NewRandomAccessFile(located->path, FileOptions());
  if (!f.ok()) return ReplyStatus(res, f.status());
  Result<uint64_t> size = (*f)->Size();
  if (!size.ok()) return ReplyStatus(res, size.status());
  res.set_content(Json{{"size", *size}, {"where", located->where}}.dump(), "application/json");
}

void PeerFileServer::Impl::HandleFile(const httplib::Request& req, const std::string& step,
                                      const std::string& file, httplib::Response& res) {
  // The pool's threads serve only this: background work (best effort).
  thread_local bool lowered = false;
  if (!lowered) lowered = LowerCurrentThreadPriority().ok();
  // Exactly one Range header with one range: a reader asks for the piece
  // it places (a plain GET of a multi-GiB file is a caller's mistake, and
  // several ranges would need a multipart answer no reader wants).
  if (req.get_header_value_count("Range") != 1) {
    return Reply(res, 400, "INVALID_ARGUMENT", "one Range: bytes=a-b header is required");
  }
  uint64_t first = 0;
  std::optional<uint64_t> last;
  if (!ParseRange(req.get_header_value("Range"), &first, &last)) {
    return Reply(res, 400, "INVALID_ARGUMENT",
                 "Range '" + req.get_header_value("Range") + "' is not bytes=a-b or bytes=a-");
  }
  Result<Located> located = Locate(step, file);
  if (!located.ok()) return ReplyStatus(res, located.status());
  auto transfer = std::make_shared<Transfer>();
  transfer->stopping = &stopping;
  {
    Result<std::unique_ptr<RandomAccessFile>> f =
        env->NewRandomAccessFile(located->path, FileOptions());
    if (!f.ok()) return ReplyStatus(res, f.status());
    transfer->file = std::move(*f);
  }
  Result<uint64_t> size = transfer->file->Size();
  if (!size.ok()) return ReplyStatus(res, size.status());
  if (first >= *size) {
    res.status = 416;
    res.set_header("Content-Range", "bytes */" + std::to_string(*size));
    return;
  }
  const uint64_t end = last && *last < *size ? *last : *size - 1;  // inclusive
  res.status = 206;
  res.set_header("Content-Range", "bytes " + std::to_string(first) + "-" + std::to_string(end) +
                                      "/" + std::to_string(*size));
  res.set_header("X-Stint-Where", located->where);
  // Offsets httplib passes are relative to `first`; it asks for the
  // remaining bytes and takes what is written, a buffer at a time.
  res.set_content_provider(
      static_cast<size_t>(end - first + 1), "application/octet-stream",
      [transfer, first, yield = options.yield](size_t offset, size_t length,
                                                httplib::DataSink& sink) {
        if (transfer->stopping->load(std::memory_order_relaxed)) return false;
        if (yield) yield();
        const size_t want = std::min(length, kTransferBuffer);
        if (transfer->buffer.size() < want) transfer->buffer.resize(want);
        Result<size_t> got =
            transfer->file->Read(first + offset, want, transfer->buffer.data());
        // A read error or a file that shrank under us: ending the answer
        // early makes the client see a short body, never wrong bytes.
        if (!got.ok() || *got == 0) return false;
        return sink.write(transfer->buffer.data(), *got);
      });
}

void PeerFileServer::Impl::InstallRoutes() {
  const std::string expected = "Bearer " + options.token;
  server.set_pre_routing_handler([expected](const httplib::Request& req, httplib::Response& res) {
    TakeOverRanges(req);
    if (req.get_header_value_count("Authorization") == 1 &&
        SameSecret(req.get_header_value("Authorization"), expected)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    Reply(res, 401, "UNAUTHENTICATED", "a valid Authorization: Bearer token is required");
    return httplib::Server::HandlerResponse::Handled;
  });
  // One route for all of /v1: the path is split and checked here, after
  // httplib's percent-decoding, so no encoding of '/' or ".." slips past a
  // pattern.
  server.Get(R"(/v1/.*)", [this](const httplib::Request& req, httplib::Response& res) {
    std::vector<std::string> parts;
    size_t start = 4;  // after "/v1/"
    while (true) {
      const size_t slash = req.path.find('/', start);
      parts.push_back(req.path.substr(start, slash == std::string::npos ? slash : slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (parts.size() == 1 && parts[0] == "steps") return HandleSteps(res);
    const bool stat = !parts.empty() && parts[0] == "stat";
    const bool files = !parts.empty() && parts[0] == "files";
    if (!stat && !files) return Reply(res, 404, "NOT_FOUND", "no such route");
    if (parts.size() != 3 || !ValidStepDir(parts[1]) || !ValidFileName(parts[2])) {
      return Reply(res, 400, "INVALID_ARGUMENT",
                   "expected /v1/" + parts[0] + "/step-<digits>/<file name>");
    }
    if (stat) return HandleStat(parts[1], parts[2], res);
    return HandleFile(req, parts[1], parts[2], res);
  });
}

PeerFileServer::PeerFileServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PeerFileServer>> PeerFileServer::Start(
    const PeerFileServerOptions& options) {
  if (options.token.empty()) {
    return Status::InvalidArgument("PeerFileServer: a token is required");
  }
  if (options.root.empty()) return Status::InvalidArgument("PeerFileServer: root is empty");
  if (options.threads == 0) return Status::InvalidArgument("PeerFileServer: threads must be >= 1");
  auto impl = std::make_unique<Impl>(options);
  const size_t threads = options.threads;
  impl->server.new_task_queue = [threads] {
    return new ConnectionThreads(threads, kMaxConnectionThreads);
  };
  // An idle connection holds a thread until its keep-alive ends, and the
  // destructor waits for it: 1 s. Reconnecting costs little next to a
  // range of MiBs.
  impl->server.set_keep_alive_timeout(1);
  impl->server.set_keep_alive_max_count(64);
  impl->server.set_read_timeout(std::chrono::seconds(10));
  impl->server.set_write_timeout(std::chrono::seconds(10));
  impl->server.set_payload_max_length(64 << 10);  // requests have no body
  impl->server.set_tcp_nodelay(true);
  // Only for the listening socket. SO_REUSEADDR only: httplib's default adds
  // SO_REUSEPORT, with which a second server on a taken port would bind and
  // share it silently.
  auto listen_fd = std::make_shared<int>(-1);
  impl->server.set_socket_options([listen_fd](int sock) {
    *listen_fd = sock;
    int yes = 1;
    // A failure only delays a restart on the same port (TIME_WAIT).
    (void)setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl->InstallRoutes();
  const std::string where = options.bind_host + ":" + std::to_string(options.port);
  if (options.port == 0) {
    impl->port = impl->server.bind_to_any_port(options.bind_host);
    if (impl->port <= 0) {
      return Status::IoError("PeerFileServer: cannot listen on " + where + " (any port)");
    }
  } else {
    if (!impl->server.bind_to_port(options.bind_host, options.port)) {
      return Status::IoError("PeerFileServer: cannot listen on " + where +
                             " (address in use or not local?)");
    }
    impl->port = options.port;
  }
  // httplib listens with a backlog of 5: a reader's burst of connections
  // would have SYNs dropped and wait out TCP's 1 s retransmit. Listening
  // again on the bound socket raises the backlog.
  if (*listen_fd >= 0 && ::listen(*listen_fd, SOMAXCONN) != 0) {
    return StatusFromErrno("PeerFileServer: listen on " + options.bind_host + ":" +
                               std::to_string(impl->port),
                           errno);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    raw->server.listen_after_bind();
    raw->listen_returned.store(true);
  });
  return std::unique_ptr<PeerFileServer>(new PeerFileServer(std::move(impl)));
}

PeerFileServer::~PeerFileServer() {
  impl_->stopping.store(true);
  // httplib's stop() does nothing before listen has begun; wait for that
  // (or for a listen that failed and returned).
  while (!impl_->listen_returned.load() && !impl_->server.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server.stop();
  impl_->thread.join();
}

int PeerFileServer::port() const { return impl_->port; }

}  // namespace stint
