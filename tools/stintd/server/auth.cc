#include "stintd/server/auth.h"

#include <cstdlib>
#include <fstream>

#include "base/strings.h"

namespace stint::stintd {
namespace {

// Timing must not tell how many leading characters of a guess were right.
bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; i++) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

bool AnyEqual(const std::vector<std::string>& tokens, const std::string& t) {
  bool found = false;
  for (const std::string& candidate : tokens) found = ConstantTimeEqual(candidate, t) || found;
  return found;
}

}  // namespace

Result<TokenAuth> TokenAuth::Create(std::vector<std::string> admin,
                                    std::vector<std::string> worker) {
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

Right TokenAuth::Check(const std::string& header) const {
  static const std::string kBearer = "Bearer ";
  if (header.compare(0, kBearer.size(), kBearer) != 0) return Right::kNone;
  const std::string token = Trim(header.substr(kBearer.size()));
  if (token.empty()) return Right::kNone;
  if (AnyEqual(admin_, token)) return Right::kAdmin;
  if (AnyEqual(worker_, token)) return Right::kWorker;
  return Right::kNone;
}

}  // namespace stint::stintd
