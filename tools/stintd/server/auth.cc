#include "stintd/server/auth.h"

#include <cstdlib>
#include <fstream>

#include "base/strings.h"
#include "stintd/server/worker_secret.h"

namespace stint::stintd {
namespace {

bool AnyEqual(const std::vector<std::string>& tokens, const std::string& t) {
  bool found = false;
  for (const std::string& candidate : tokens) found = ConstantTimeEqual(candidate, t) || found;
  return found;
}

}  // namespace

Result<TokenAuth> TokenAuth::Create(std::vector<std::string> admin, std::vector<std::string> worker,
                                    std::vector<std::string> agent) {
  for (const std::string& t : agent) {
    if (t.size() < 16) return Status::InvalidArgument("an agent token is shorter than 16 characters");
    if (AnyEqual(admin, t) || AnyEqual(worker, t))
      return Status::InvalidArgument("a token is listed as agent and as admin or worker");
  }
  for (const auto* list : {&admin, &worker}) {
    const char* what = list == &admin ? "admin" : "worker";
    if (list->empty()) {
      return Status::InvalidArgument(std::string("no ") + what + " token: give --" + what +
                                     "-token-file or $STINTD_" +
                                     (list == &admin ? "ADMIN" : "WORKER") + "_TOKEN");
    }
    for (const std::string& t : *list) {
      if (t.size() < 16) {
        return Status::InvalidArgument(std::string("an ") + what +
                                       " token is shorter than 16 characters");
      }
    }
  }
  for (const std::string& t : admin) {
    if (AnyEqual(worker, t))
      return Status::InvalidArgument("a token is listed as both admin and worker");
  }
  TokenAuth auth;
  auth.admin_ = std::move(admin);
  auth.worker_ = std::move(worker);
  auth.agent_ = std::move(agent);
  auth.scoped_key_ = Sha256Hex("stint registration tokens v1\n" + auth.admin_.front());
  return auth;
}

Result<std::vector<std::string>> TokenAuth::Load(const std::string& file, const char* env_var) {
  std::vector<std::string> tokens;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return Status::NotFound("cannot read token file " + file);
    std::string line;
    while (std::getline(in, line)) {
      line = Trim(line);
      if (!line.empty() && line[0] != '#') tokens.push_back(line);
    }
    if (in.bad()) return Status::IoError("error reading token file " + file);
  }
  if (const char* v = std::getenv(env_var); v != nullptr && *v != '\0') tokens.push_back(Trim(v));
  return tokens;
}

std::string BearerToken(const std::string& header) {
  static const std::string kBearer = "Bearer ";
  if (header.compare(0, kBearer.size(), kBearer) != 0) return "";
  return Trim(header.substr(kBearer.size()));
}

Right TokenAuth::Check(const std::string& header) const {
  const std::string token = BearerToken(header);
  if (token.empty()) return Right::kNone;
  if (AnyEqual(admin_, token)) return Right::kAdmin;
  if (AnyEqual(worker_, token)) return Right::kWorker;
  if (AnyEqual(agent_, token)) return Right::kAgent;
  return Right::kNone;
}

std::string TokenAuth::ScopedMac(const ScopedToken& t) const {
  const std::string what = t.segment == 0
                               ? "job " + std::to_string(t.job)
                               : "segment " + std::to_string(t.segment) + " node " + t.node;
  return HmacSha256Hex(scoped_key_, what);
}

std::string TokenAuth::JobToken(int64_t job) const {
  ScopedToken t;
  t.job = job;
  t.mac = ScopedMac(t);
  return t.Text();
}

std::string TokenAuth::SegmentToken(int64_t segment, const std::string& node) const {
  ScopedToken t;
  t.segment = segment;
  t.node = node;
  t.mac = ScopedMac(t);
  return t.Text();
}

bool TokenAuth::CheckScoped(const std::string& header, ScopedToken* out) const {
  ScopedToken t;
  if (!ParseScopedToken(BearerToken(header), &t) || !ConstantTimeEqual(ScopedMac(t), t.mac))
    return false;
  *out = std::move(t);
  return true;
}

}  // namespace stint::stintd
