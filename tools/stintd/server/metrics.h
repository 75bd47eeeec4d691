// /metrics: Prometheus text exposition format 0.0.4.
#ifndef STINT_TOOLS_STINTD_SERVER_METRICS_H_
#define STINT_TOOLS_STINTD_SERVER_METRICS_H_

#include <string>

#include "stintd/core/model.h"
#include "stintd/core/policy.h"
#include "stintd/server/coordinator.h"

namespace stint::stintd {

std::string RenderMetrics(const ClusterState& s, const Plan& plan, TimeMs now,
                          const ServerCounters& server);

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_METRICS_H_
