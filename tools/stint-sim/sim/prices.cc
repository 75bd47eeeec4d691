#include "sim/prices.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "base/strings.h"
#include "sim/trace.h"

namespace stint::sim {
namespace {

// A pool name as stintd accepts it: [A-Za-z0-9._-]{1,64}.
bool ValidPoolName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// The whole of `s` as one finite number >= 0.
bool NonNegative(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

const PoolPrice* PriceTable::Find(const std::string& pool) const {
  for (const PoolPrice& p : pools) {
    if (p.pool == pool) return &p;
  }
  return nullptr;
}

double PriceTable::PriceOf(const std::string& pool) const {
  const PoolPrice* p = Find(pool);
  return p != nullptr ? p->per_gpu_hour : 0;
}

std::string PriceTable::ToString() const {
  std::string out;
  for (const PoolPrice& p : pools) {
    out += (out.empty() ? "" : ",") + p.pool + "=" + stintd::PoolPricingName(p.pricing) + ":" +
           Number(p.per_gpu_hour);
  }
  return out;
}

Result<PriceTable> ParsePriceTable(const std::string& spec) {
  PriceTable table;
  if (Trim(spec).empty()) return Status::InvalidArgument("--prices is empty");
  size_t from = 0;
  for (int index = 1;; index++) {
    const size_t comma = spec.find(',', from);
    const std::string entry =
        Trim(spec.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    auto bad = [&](const std::string& what) {
      return Status::InvalidArgument("--prices entry " + std::to_string(index) + " (\"" + entry +
                                     "\"): " + what);
    };
    const size_t eq = entry.find('=');
    const size_t colon = entry.find(':', eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || colon == std::string::npos)
      return bad("expected POOL=KIND:PRICE");
    PoolPrice p;
    p.pool = Trim(entry.substr(0, eq));
    if (!ValidPoolName(p.pool))
      return bad("pool \"" + p.pool + "\" must match [A-Za-z0-9._-]{1,64}");
    if (table.Find(p.pool) != nullptr) return bad("pool \"" + p.pool + "\" is priced twice");
    std::string kind = Trim(entry.substr(eq + 1, colon - eq - 1));
    std::replace(kind.begin(), kind.end(), '-', '_');
    auto pricing = stintd::ParsePoolPricing(kind);
    if (!pricing.ok()) return bad("kind \"" + kind + "\" is not one of on_prem, on_demand, spot");
    p.pricing = pricing.value();
    const std::string price = Trim(entry.substr(colon + 1));
    const size_t star = price.find('*');
    if (star == std::string::npos) {
      if (!NonNegative(price, &p.per_gpu_hour))
        return bad("price \"" + price + "\" is not a number >= 0 or FRACTION*POOL");
    } else {
      double fraction = 0;
      const std::string of = Trim(price.substr(star + 1));
      if (!NonNegative(Trim(price.substr(0, star)), &fraction))
        return bad("fraction in \"" + price + "\" is not a number >= 0");
      const PoolPrice* base = table.Find(of);
      if (base == nullptr)
        return bad("\"" + of + "\" in \"" + price + "\" is not a pool priced before it");
      p.per_gpu_hour = fraction * base->per_gpu_hour;
    }
    table.pools.push_back(p);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return table;
}

Status CheckPriceTable(const PriceTable& table, const std::vector<SimWindow>& windows) {
  if (table.empty()) return Status::OK();
  std::set<std::string> pools;
  for (const SimWindow& w : windows) pools.insert(w.pool);
  std::string names;
  for (const std::string& p : pools) names += (names.empty() ? "" : ", ") + p;
  for (const PoolPrice& p : table.pools) {
    if (!pools.count(p.pool)) {
      return Status::InvalidArgument("--prices: pool \"" + p.pool +
                                     "\" has no capacity (the capacity's pools: " + names + ")");
    }
  }
  for (const std::string& p : pools) {
    if (table.Find(p) == nullptr) {
      return Status::InvalidArgument("--prices: the capacity's pool \"" + p +
                                     "\" has no price (give it one, 0 for free)");
    }
  }
  return Status::OK();
}

}  // namespace stint::sim
