#include "stintd/server/worker_secret.h"

#include <errno.h>
#include <sys/random.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace stint::stintd {
namespace {

constexpr char kPrefix[] = "stw1.";
constexpr size_t kRandomBytes = 32;

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void Block(uint32_t h[8], const unsigned char* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++) {
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 |
           uint32_t(p[4 * i + 3]);
  }
  for (int i = 16; i < 64; i++) {
    const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    const uint32_t s1 = Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25);
    const uint32_t ch = (e & f) ^ (~e & g);
    const uint32_t t1 = k + s1 + ch + kK[i] + w[i];
    const uint32_t s0 = Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22);
    const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = s0 + maj;
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string Sha256Hex(const std::string& data) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  while (n >= 64) {
    Block(h, p);
    p += 64;
    n -= 64;
  }
  // The tail, the 0x80 marker and the length in bits: one or two blocks.
  unsigned char tail[128] = {};
  std::memcpy(tail, p, n);
  tail[n] = 0x80;
  const size_t blocks = n + 9 <= 64 ? 1 : 2;
  const uint64_t bits = uint64_t(data.size()) * 8;
  for (int i = 0; i < 8; i++) tail[blocks * 64 - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t b = 0; b < blocks; b++) Block(h, tail + 64 * b);
  unsigned char digest[32];
  for (int i = 0; i < 8; i++) {
    digest[4 * i] = static_cast<unsigned char>(h[i] >> 24);
    digest[4 * i + 1] = static_cast<unsigned char>(h[i] >> 16);
    digest[4 * i + 2] = static_cast<unsigned char>(h[i] >> 8);
    digest[4 * i + 3] = static_cast<unsigned char>(h[i]);
  }
  return Hex(digest, sizeof(digest));
}

std::string HmacSha256Hex(const std::string& key, const std::string& data) {
  constexpr size_t kBlock = 64;
  std::string k = key;
  if (k.size() > kBlock) {
    const std::string hex = Sha256Hex(k);
    k.clear();
    for (size_t i = 0; i < hex.size(); i += 2)
      k.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  k.resize(kBlock, '\0');
  std::string inner(kBlock, '\0'), outer(kBlock, '\0');
  for (size_t i = 0; i < kBlock; i++) {
    inner[i] = static_cast<char>(k[i] ^ 0x36);
    outer[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  const std::string inner_hex = Sha256Hex(inner + data);
  std::string inner_digest;
  for (size_t i = 0; i < inner_hex.size(); i += 2)
    inner_digest.push_back(static_cast<char>(std::stoi(inner_hex.substr(i, 2), nullptr, 16)));
  return Sha256Hex(outer + inner_digest);
}

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

std::string WorkerSecret::For(int64_t worker_id) const {
  return kPrefix + std::to_string(worker_id) + "." + random;
}

Result<WorkerSecret> NewWorkerSecret() {
  unsigned char bytes[kRandomBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t r = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Status::IoError(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  WorkerSecret s;
  s.random = Hex(bytes, sizeof(bytes));
  s.hash = Sha256Hex(s.random);
  return s;
}

bool ParseWorkerSecret(const std::string& token, int64_t* worker_id, std::string* random) {
  const size_t prefix = sizeof(kPrefix) - 1;
  if (token.compare(0, prefix, kPrefix) != 0) return false;
  const size_t dot = token.find('.', prefix);
  if (dot == std::string::npos) return false;
  int64_t id = 0;
  auto [p, ec] = std::from_chars(token.data() + prefix, token.data() + dot, id);
  if (ec != std::errc() || p != token.data() + dot || id <= 0) return false;
  std::string r = token.substr(dot + 1);
  if (r.size() != 2 * kRandomBytes) return false;
  *worker_id = id;
  *random = std::move(r);
  return true;
}

std::string ScopedToken::Text() const {
  if (segment == 0) return "stj1." + std::to_string(job) + "." + mac;
  return "stg1." + std::to_string(segment) + "." + node + "." + mac;
}

bool ParseScopedToken(const std::string& token, ScopedToken* out) {
  const bool job = token.compare(0, 5, "stj1.") == 0;
  if (!job && token.compare(0, 5, "stg1.") != 0) return false;
  // The id after the prefix; the MAC after the last dot (node names may
  // hold dots; the MAC holds none).
  const size_t id_end = token.find('.', 5);
  const size_t mac_at = token.rfind('.');
  if (id_end == std::string::npos || mac_at + 1 + 2 * kRandomBytes != token.size()) return false;
  int64_t id = 0;
  auto [p, ec] = std::from_chars(token.data() + 5, token.data() + id_end, id);
  if (ec != std::errc() || p != token.data() + id_end || id <= 0) return false;
  ScopedToken t;
  t.mac = token.substr(mac_at + 1);
  if (job) {
    if (mac_at != id_end) return false;
    t.job = id;
  } else {
    if (mac_at <= id_end + 1) return false;
    t.segment = id;
    t.node = token.substr(id_end + 1, mac_at - id_end - 1);
  }
  *out = std::move(t);
  return true;
}

std::string NodeTokenFor(const std::string& node, const std::string& random) {
  return "stn1." + node + "." + random;
}

bool ParseNodeToken(const std::string& token, std::string* node, std::string* random) {
  static const std::string kNodePrefix = "stn1.";
  if (token.compare(0, kNodePrefix.size(), kNodePrefix) != 0) return false;
  // Node names may hold dots; the random part holds none.
  const size_t dot = token.rfind('.');
  if (dot == std::string::npos || dot <= kNodePrefix.size()) return false;
  std::string r = token.substr(dot + 1);
  if (r.size() != 2 * kRandomBytes) return false;
  *node = token.substr(kNodePrefix.size(), dot - kNodePrefix.size());
  *random = std::move(r);
  return true;
}

}  // namespace stint::stintd
