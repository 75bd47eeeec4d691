// GET /v1/segments (API.md, "Segments"): every segment, or one job's; an
// agent sees those of jobs placed on its node only.
#include <httplib.h>

#include <charconv>
#include <string>

#include "stintd/server/json_model.h"
#include "stintd/server/routes.h"

namespace stint::stintd {

void InstallSegmentRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  const Authorization* authz = routes->authorization();
  routes->Add(Method::kGet, "/v1/segments", Access::kRead, [c, authz](const httplib::Request& req) {
    const JobReader reader = authz->Reader(req);
    int64_t job_filter = 0;
    if (req.has_param("job_id")) {
      const std::string v = req.get_param_value("job_id");
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), job_filter);
      if (ec != std::errc() || p != v.data() + v.size() || job_filter <= 0) {
        return ErrorReply(Status::InvalidArgument("job_id must be a positive integer"));
      }
    }
    json segments = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      const SeenJobs seen(s, reader);  // an agent: only its node's jobs
      for (const auto& [id, seg] : s.segments) {
        if ((job_filter == 0 || seg.job_id == job_filter) && seen.Has(seg.job_id))
          segments.push_back(SegmentJson(seg));
      }
    });
    return Reply{200, {{"segments", segments}}, {}, {}};
  });
}

}  // namespace stint::stintd
