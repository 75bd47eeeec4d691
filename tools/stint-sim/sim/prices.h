// A replay's price table: for each pool, how its GPUs are paid for
// (on-prem amortised, on-demand, spot) and the price per GPU-hour. The
// engine charges every policy from it (GPU-seconds held x the price of the
// allocation's pool); stint's scheduler gives it to its ClusterState's
// pools so stintd's planner routes by it. Pure values and functions,
// thread-compatible. The grammar is in METHOD.md ("Prices").
#ifndef STINT_TOOLS_STINT_SIM_SIM_PRICES_H_
#define STINT_TOOLS_STINT_SIM_SIM_PRICES_H_

#include <string>
#include <vector>

#include "stint/status.h"
#include "stintd/core/model.h"

namespace stint::sim {

struct SimWindow;

struct PoolPrice {
  std::string pool;
  stintd::PoolPricing pricing = stintd::PoolPricing::kOnDemand;
  double per_gpu_hour = 0;
};

// The pools in the order given: the order first-fit tries them in.
struct PriceTable {
  std::vector<PoolPrice> pools;

  bool empty() const { return pools.empty(); }
  // The pool's entry, or null when the table does not name it.
  const PoolPrice* Find(const std::string& pool) const;
  // Its price per GPU-hour; 0 for a pool the table does not name.
  double PriceOf(const std::string& pool) const;
  // "onprem=on_prem:0.80,ondemand=on_demand:3.00,spot=spot:1.05" (what
  // ParsePriceTable reads back).
  std::string ToString() const;
};

// Parses --prices: entries POOL=KIND:PRICE joined by ','. KIND is on_prem,
// on_demand or spot ('-' for '_' and any case accepted); PRICE is a
// number >= 0 per GPU-hour, or FRACTION*POOL: that fraction of the price of
// a pool named earlier in the table (spot=spot:0.35*ondemand). On error
// kInvalidArgument naming the entry by position and text and what is wrong
// with it: `--prices entry 2 ("spot=spot:x"): price "x" is not a number >= 0
// or FRACTION*POOL`.
Result<PriceTable> ParsePriceTable(const std::string& spec);

// Every pool the table names has a window in `windows`, and (unless the
// table is empty) every pool of `windows` is priced, so that no GPU-hour
// is silently free. kInvalidArgument naming the pool otherwise.
Status CheckPriceTable(const PriceTable& table, const std::vector<SimWindow>& windows);

}  // namespace stint::sim

#endif  // STINT_TOOLS_STINT_SIM_SIM_PRICES_H_
