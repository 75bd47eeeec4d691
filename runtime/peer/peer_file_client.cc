#include "peer/peer_file_client.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "base/strings.h"

namespace stint {
namespace {

using Json = nlohmann::json;

constexpr int kAttempts = 3;
// Idle connections kept per peer: a load's reader threads, no more.
constexpr size_t kMaxIdle = 8;
// Of an error answer's body, what goes into the message.
constexpr size_t kMaxErrorBody = 4096;



// "http://host:port[/]" or "http://[v6]:port[/]".
Status ParsePeerUrl(const std::string& url, std::string* host, int* port) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("peer url '" + url + "': " + why +
                                   " (expected http://host:port)");
  };
  constexpr char kScheme[] = "http://";
  if (url.compare(0, sizeof(kScheme) - 1, kScheme) != 0) return bad("not http://");
  std::string rest = url.substr(sizeof(kScheme) - 1);
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad("expected [IPv6]:port");
    }
    *host = rest.substr(1, close - 1);
    port_text = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    *host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
  }
  if (host->empty() || host->find_first_of("/?#@") != std::string::npos) return bad("bad host");
  uint64_t p = 0;
  if (!ParseDecimalU64(port_text, &p) || p < 1 || p > 65535) return bad("port not in 1..65535");
  *port = static_cast<int>(p);
  return Status::OK();
}

std::string DescribeTransportError(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "connection failed (refused or unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no complete answer (connection closed, or the read timed out)";
    case httplib::Error::Write:
      return "could not send the request (connection closed)";
    default:
      return httplib::to_string(e);
  }
}

std::string Shorten(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// The Status of a non-2xx answer; `what` names the peer and the file.
Status StatusFromAnswer(int status, const std::string& body, const std::string& what) {
  std::string message, code;
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const Json& e = j["error"];
    if (e.contains("message") && e["message"].is_string()) message = e["message"];
    if (e.contains("code") && e["code"].is_string()) code = e["code"];
  }
  if (message.empty()) message = body.empty() ? "no error message" : Shorten(body);
  const std::string text = what + ": " + message + " (HTTP " + std::to_string(status) + ")";
  switch (status) {
    case 400:
      return Status::InvalidArgument(text);
    case 401:
      return Status::Unauthenticated(text);
    case 403:
      return Status::PermissionDenied(text);
    case 404:
      return Status::NotFound(text);
    case 500:
      return code == "IO_ERROR" ? Status::IoError(text) : Status::Internal(text);
    case 502:
    case 503:
    case 504:
      return Status::Unavailable(text);
    default:
      break;
  }
  if (status >= 400 && status < 500) return Status::InvalidArgument(text);
  return Status::Internal(text);
}

void Backoff(int attempt) {
  // 20 ms, 40 ms: a refused connection fails at once, a restarting peer
  // gets a moment; the three attempts stay well inside one timeout.
  std::this_thread::sleep_for(std::chrono::milliseconds(20 << (attempt - 1)));
}

class PeerFile : public RandomAccessFile {
 public:
  PeerFile(std::shared_ptr<PeerFileClient> client, std::string step_dir, std::string file,
           uint64_t size)
      : client_(std::move(client)),
        step_dir_(std::move(step_dir)),
        file_(std::move(file)),
        size_(size),
        path_(client_->url() + "/" + step_dir_ + "/" + file_) {}

  Result<size_t> Read(uint64_t offset, size_t n, void* dst) const override {
    // A committed file does not change: its size at open says where it ends,
    // without a round trip for a read at the end.
    if (offset >= size_ || n == 0) return size_t{0};
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
    STINT_ASSIGN_OR_RETURN(size_t got, client_->ReadRange(step_dir_, file_, offset, want, dst));
    if (got != want) {
      return Status::DataLoss(path_ + ": " + std::to_string(got) + " bytes at offset " +
                              std::to_string(offset) + " where " + std::to_string(want) +
                              " were expected (the file is " + std::to_string(size_) +
                              " bytes): it shrank on the peer");
    }
    return got;
  }
  Result<uint64_t> Size() const override { return size_; }
  bool direct_io() const override { return false; }
  const std::string& path() const override { return path_; }

 private:
  const std::shared_ptr<PeerFileClient> client_;
  const std::string step_dir_;
  const std::string file_;
  const uint64_t size_;
  const std::string path_;
};

}  // namespace

PeerFileClient::PeerFileClient(std::string url, std::string token,
                               std::chrono::milliseconds timeout)
    : url_(std::move(url)), token_(std::move(token)), timeout_(timeout) {
  url_status_ = ParsePeerUrl(url_, &host_, &port_);
  if (url_status_.ok() && timeout_.count() <= 0) {
    url_status_ = Status::InvalidArgument("peer " + url_ + ": timeout must be positive");
  }
}

PeerFileClient::~PeerFileClient() = default;

Result<std::unique_ptr<httplib::Client>> PeerFileClient::Acquire() {
  STINT_RETURN_IF_ERROR(url_status_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<httplib::Client> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<httplib::Client>(host_, port_);
  c->set_keep_alive(true);
  // The request goes out in pieces; without TCP_NODELAY a later piece waits
  // for the server's delayed ACK.
  c->set_tcp_nodelay(true);
  c->set_connection_timeout(timeout_);
  c->set_read_timeout(timeout_);
  c->set_write_timeout(timeout_);
  return c;
}

void PeerFileClient::Release(std::unique_ptr<httplib::Client> client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(client));
}

Result<std::string> PeerFileClient::GetSmall(const std::string& path, const std::string& what) {
  const httplib::Headers headers = {{"Authorization", "Bearer " + token_}};
  std::string transport_error;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (attempt > 1) Backoff(attempt - 1);
    STINT_ASSIGN_OR_RETURN(std::unique_ptr<httplib::Client> client, Acquire());
    httplib::Result r = client->Get(path, headers);
    if (!r) {
      // The connection's state is unknown: it is not pooled again.
      transport_error = DescribeTransportError(r.error());
      continue;
    }
    const int status = r->status;
    std::string body = std::move(r->body);
    Release(std::move(client));
    if (status != 200) return StatusFromAnswer(status, body, what);
    return body;
  }
  return Status::Unavailable(what + ": " + transport_error + "; gave up after " +
                             std::to_string(kAttempts) + " attempts");
}

Result<std::vector<std::string>> PeerFileClient::ListSteps() {
  const std::string what = "peer " + url_ + " (list steps)";
  STINT_ASSIGN_OR_RETURN(std::string body, GetSmall("/v1/steps", what));
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("steps") || !j["steps"].is_array()) {
    return Status::DataLoss(what + ": answer is not {\"steps\": [...]}: " + Shorten(body));
  }
  std::vector<std::pair<uint64_t, std::string>> steps;
  for (const Json& s : j["steps"]) {
    uint64_t n = 0;
    if (!s.is_object() || !s.contains("dir") || !s["dir"].is_string()) {
      return Status::DataLoss(what + ": a step without \"dir\": " + Shorten(s.dump()));
    }
    const std::string dir = s["dir"];
    if (dir.compare(0, 5, "step-") != 0 || !ParseDecimalU64(dir.substr(5), &n)) {
      return Status::DataLoss(what + ": '" + Shorten(dir) + "' is not a step directory");
    }
    steps.emplace_back(n, dir);
  }
  // Root and replica may both hold a step: each once.
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::vector<std::string> out;
  out.reserve(steps.size());
  for (auto& [n, dir] : steps) out.push_back(std::move(dir));
  return out;
}

Result<uint64_t> PeerFileClient::FileSize(const std::string& step_dir, const std::string& file) {
  const std::string what = "peer " + url_ + " " + step_dir + "/" + file;
  STINT_ASSIGN_OR_RETURN(
      std::string body,
      GetSmall("/v1/stat/" + PercentEncode(step_dir) + "/" + PercentEncode(file), what));
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("size") || !j["size"].is_number_unsigned()) {
    return Status::DataLoss(what + ": stat answer has no size: " + Shorten(body));
  }
  return j["size"].get<uint64_t>();
}

Result<size_t> PeerFileClient::ReadRange(const std::string& step_dir, const std::string& file,
                                         uint64_t offset, size_t n, void* dst) {
  const std::string what = "peer " + url_ + " " + step_dir + "/" + file;
  if (n == 0) return size_t{0};
  if (n - 1 > UINT64_MAX - offset) {
    return Status::InvalidArgument(what + ": range at " + std::to_string(offset) + " of " +
                                   std::to_string(n) + " bytes overflows");
  }
  const std::string path = "/v1/files/" + PercentEncode(step_dir) + "/" + PercentEncode(file);
  const httplib::Headers headers = {
      {"Authorization", "Bearer " + token_},
      {"Range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1)}};
  char* out = static_cast<char*>(dst);
  std::string transport_error;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (attempt > 1) Backoff(attempt - 1);
    STINT_ASSIGN_OR_RETURN(std::unique_ptr<httplib::Client> client, Acquire());
    int status = 0;
    std::string content_range, error_body;
    size_t got = 0;
    bool overran = false;
    // The body goes straight into dst: no copy of the range is held.
    httplib::Result r = client->Get(
        path, headers,
        [&](const httplib::Response& res) {
          status = res.status;
          content_range = res.get_header_value("Content-Range");
          return true;
        },
        [&](const char* data, size_t len) {
          if (status != 206) {
            error_body.append(data, std::min(len, kMaxErrorBody - error_body.size()));
            return true;
          }
          if (len > n - got) {
            overran = true;
            return false;
          }
          std::memcpy(out + got, data, len);
          got += len;
          return true;
        });
    if (overran) {
      return Status::DataLoss(what + ": more than the " + std::to_string(n) +
                              " bytes asked for at offset " + std::to_string(offset));
    }
    if (!r) {
      // Mid-body failures (the server stopped, the connection reset) land
      // here too; the range is simply read again.
      transport_error = DescribeTransportError(r.error());
      continue;
    }
    Release(std::move(client));
    if (status == 416) return size_t{0};  // offset at or past the end
    if (status != 206) return StatusFromAnswer(status, error_body, what);
    uint64_t first = 0, last = 0, total = 0;
    if (!ParseContentRange(content_range, &first, &last, &total) || first > last ||
        last >= total || first != offset ||
        last - first + 1 != got || got != std::min<uint64_t>(n, total - offset)) {
      return Status::DataLoss(what + ": asked for " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + ", got " + std::to_string(got) +
                              " with Content-Range '" + Shorten(content_range) + "'");
    }
    return got;
  }
  return Status::Unavailable(what + ": " + transport_error + "; gave up after " +
                             std::to_string(kAttempts) + " attempts");
}

Result<std::unique_ptr<RandomAccessFile>> OpenPeerFile(std::shared_ptr<PeerFileClient> client,
                                                       const std::string& step_dir,
                                                       const std::string& file) {
  STINT_ASSIGN_OR_RETURN(uint64_t size, client->FileSize(step_dir, file));
  return std::unique_ptr<RandomAccessFile>(
      new PeerFile(std::move(client), step_dir, file, size));
}

}  // namespace stint
