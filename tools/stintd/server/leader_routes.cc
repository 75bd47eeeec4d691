// GET /v1/leader: which stintd leads the ones sharing a database, at which
// epoch, and the standbys (store/leader_lease.h). A stintd alone on its
// store answers epoch 0 and no leader.
#include <httplib.h>

#include "stintd/server/routes.h"

namespace stint::stintd {

void InstallLeaderRoutes(Routes* routes, std::function<Result<LeaderView>()> view) {
  routes->Add(Method::kGet, "/v1/leader", Access::kRead, [view](const httplib::Request&) {
    if (!view) return Reply{200, {{"epoch", 0}, {"leader", nullptr}, {"standbys", json::array()}}, {}, {}};
    Result<LeaderView> v = view();
    if (!v.ok()) return ErrorReply(v.status());
    json standbys = json::array();
    for (const LeaseMember& m : v->standbys) {
      standbys.push_back(
          {{"holder", m.holder}, {"url", m.url}, {"seen_seconds_ago", m.seen_seconds_ago}});
    }
    return Reply{200,
                 {{"epoch", v->epoch},
                  {"leader",
                   {{"holder", v->holder},
                    {"url", v->url},
                    {"expires_in_seconds", v->expires_in_seconds}}},
                  {"standbys", standbys}},
                 {},
                 {}};
  });
}

}  // namespace stint::stintd
