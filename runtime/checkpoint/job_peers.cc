#include "checkpoint/job_peers.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/rank_commit.h"
#include "peer/peer_file_client.h"
#include "peer/peer_file_server.h"

namespace stint {
namespace {

using json = nlohmann::json;

// What a rank's record says once its Checkpointer has closed.
constexpr char kClosedRecord[] = "closed";

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string PeerKey(const CheckpointOptions& options, int rank) {
  return ChannelPrefix(options) + "/peer/" + std::to_string(rank);
}

std::string RandomToken() {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) token += kHex[rd() % 16];
  return token;
}

// The local address of a route to `host` (no packet is sent: a UDP
// connect only picks the route).
std::string RouteSourceAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "";
  std::string out;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = {};
    if (connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr) {
      out = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return out;
}

}  // namespace

std::string AdvertisedNodeAddress() {
  if (std::string addr = Getenv("STINT_NODE_ADDR"); !addr.empty()) return addr;
  if (std::string master = Getenv("MASTER_ADDR"); !master.empty()) {
    if (std::string addr = RouteSourceAddress(master); !addr.empty()) return addr;
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') {
    if (std::string addr = RouteSourceAddress(host); !addr.empty()) return addr;
  }
  return "127.0.0.1";
}

JobPeers::JobPeers(const CheckpointOptions& options, std::unique_ptr<PeerFileServer> server)
    : options_(options), server_(std::move(server)), domain_(Getenv("STINT_FAILURE_DOMAIN")) {}

JobPeers::~JobPeers() {
  // Not deleted: a rank still listing the job's steps (Refresh, partial)
  // would wait out its deadline for a record that never comes. Best effort:
  // a record left naming a server that is gone is passed over by readers.
  options_.commit_channel->Set(PeerKey(options_, options_.rank), kClosedRecord).IgnoreError();
}

Result<std::unique_ptr<JobPeers>> JobPeers::Start(const CheckpointOptions& options, Env* env,
                                                  const std::string& replica_dir,
                                                  const ForegroundGate* gate) {
  const std::string address = AdvertisedNodeAddress();
  PeerFileServerOptions so;
  so.env = env;
  so.root = options.root;
  so.replica_dir = replica_dir;
  so.bind_host = Getenv("STINT_NODE_ADDR").empty() ? "0.0.0.0" : address;
  so.token = RandomToken();
  if (gate != nullptr) so.yield = [gate] { gate->Yield(); };
  STINT_ASSIGN_OR_RETURN(auto server, PeerFileServer::Start(so));
  std::unique_ptr<JobPeers> peers(new JobPeers(options, std::move(server)));
  const std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
  json record{{"node", options.node_id},
              {"domain", peers->domain_},
              {"url", "http://" + host + ":" + std::to_string(peers->server_->port())},
              {"token", so.token}};
  STINT_RETURN_IF_ERROR(options.commit_channel->Set(PeerKey(options, options.rank), record.dump())
                            .WithContext("publishing this rank's checkpoint file service"));
  return peers;
}

Status JobPeers::Refresh(std::chrono::steady_clock::time_point deadline, bool partial) {
  std::vector<std::string> keys;
  for (int r = 0; r < options_.world_size; ++r) keys.push_back(PeerKey(options_, r));
  std::vector<std::optional<std::string>> values(keys.size());
  std::vector<int> missing;
  for (int r = 0; r < options_.world_size; ++r) {
    STINT_ASSIGN_OR_RETURN(values[r], options_.commit_channel->WaitFor(keys[r], deadline));
    if (!values[r] && !partial) missing.push_back(r);
    // A closed rank serves nothing, and waiting would only outlast a rank
    // that failed and left: it is an answer, not a peer.
    if (values[r] && *values[r] == kClosedRecord) values[r].reset();
  }
  if (!missing.empty() && !partial) {
    std::string named;
    for (int r : missing) named += (named.empty() ? "rank " : ", rank ") + std::to_string(r);
    return Status::DeadlineExceeded(named + " did not publish its checkpoint file service on " +
                                    options_.commit_channel->Describe());
  }
  const auto timeout = std::chrono::milliseconds(10'000);
  std::map<std::string, Peer> by_node;
  for (int r = 0; r < options_.world_size; ++r) {
    if (!values[r]) continue;
    json j = json::parse(*values[r], nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("node") || !j["node"].is_string() || !j.contains("url") ||
        !j["url"].is_string() || !j.contains("token") || !j["token"].is_string()) {
      return Status::DataLoss(keys[r] + ": malformed checkpoint file service record");
    }
    const std::string node = j["node"].get<std::string>();
    if (node == options_.node_id || by_node.count(node) != 0) continue;
    Peer p;
    p.node = node;
    p.domain = j.contains("domain") && j["domain"].is_string() ? j["domain"].get<std::string>() : "";
    p.client = std::make_shared<PeerFileClient>(j["url"].get<std::string>(),
                                                j["token"].get<std::string>(), timeout);
    by_node.emplace(node, std::move(p));
  }
  std::vector<Peer> peers;
  for (auto& [node, p] : by_node) peers.push_back(std::move(p));
  std::lock_guard<std::mutex> lock(mu_);
  peers_ = std::move(peers);
  return Status::OK();
}

std::vector<Peer> JobPeers::peers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peers_;
}

}  // namespace stint
