// The routes outside /v1: the health check, the dashboard's page and the
// Prometheus metrics (dashboard.h, metrics.h).
#include <httplib.h>

#include <string>

#include "stintd/server/dashboard.h"
#include "stintd/server/metrics.h"
#include "stintd/server/routes.h"

namespace stint::stintd {

void InstallMetricsRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  routes->Add(Method::kGet, "/healthz", Access::kOpen, [](const httplib::Request&) {
    return Reply{200, {{"ok", true}}, {}, {}};
  });

  // Static HTML without data: its script fetches the read views with the token from its URL
  // fragment.
  routes->Add(Method::kGet, "/dashboard", Access::kOpen, [](const httplib::Request&) {
    return Reply{200, {}, std::string(DashboardHtml()), "text/html; charset=utf-8"};
  });

  routes->Add(Method::kGet, "/metrics", Access::kRead, [c](const httplib::Request&) {
    Reply r;
    const ServerCounters sc = c->server_counters();
    c->Read([&](const ClusterState& s, const Plan& plan, TimeMs now) {
      r.text = RenderMetrics(s, plan, now, sc);
    });
    r.content_type = "text/plain; version=0.0.4";
    return r;
  });
}

}  // namespace stint::stintd
