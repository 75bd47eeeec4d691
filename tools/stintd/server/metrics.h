// /metrics: Prometheus text exposition format 0.0.4.
#ifndef STINT_TOOLS_STINTD_SERVER_METRICS_H_
#define STINT_TOOLS_STINTD_SERVER_METRICS_H_

#include <string>

#include "core/model.h"
#include "core/policy.h"
#include "server/coordinator.h"

namespace stint::coord {

std::string RenderMetrics(const ClusterState& s, const Plan& plan, TimeMs now, const ServerCounters& server);

}  // namespace stint::coord

#endif  // STINT_TOOLS_STINTD_SERVER_METRICS_H_
