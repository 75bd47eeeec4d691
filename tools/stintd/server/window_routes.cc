// The capacity routes (API.md, "Pools", "Windows", "Teams"): pools, the
// windows that lend GPUs to them (also one per named node), and the teams'
// guarantees and borrowing limits.
#include <httplib.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stintd/server/json_model.h"
#include "stintd/server/request_params.h"
#include "stintd/server/routes.h"

namespace stint::stintd {
namespace {

// `gpus_required` false: an absent "gpus" leaves Window::gpus 0 (an admin
// window on nodes that each name their GPU indices).
Result<Window> ParseWindowSpec(const RequestBody& b, TimeMs now, bool gpus_required = true) {
  Window w;
  STINT_ASSIGN_OR_RETURN(w.pool, b.String("pool"));
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> given, b.OptionalInt64("gpus"));
  if (!given && gpus_required) return b.Int64("gpus").status();  // "gpus is required"
  const int64_t gpus = given.value_or(1);  // absent: passes the check below, w.gpus stays 0
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> start, b.OptionalInt64("start_ms"));
  STINT_ASSIGN_OR_RETURN(std::optional<int64_t> end, b.OptionalInt64("end_ms"));
  STINT_ASSIGN_OR_RETURN(std::optional<std::string> kind, b.OptionalString("kind"));
  STINT_ASSIGN_OR_RETURN(std::optional<double> lead, b.OptionalNumber("notice_lead_seconds"));
  if (gpus < 1 || gpus > 1000000) {
    return Status::InvalidArgument("gpus must be between 1 and 1000000 (got " +
                                   std::to_string(gpus) + ")");
  }
  w.gpus = b.Find("gpus") != nullptr ? static_cast<int>(gpus) : 0;
  w.start_ms = start.value_or(now);
  w.end_ms = end.value_or(kNever);
  if (kind) {
    STINT_ASSIGN_OR_RETURN(w.kind, ParseWindowKind(*kind));
  }
  if (lead && !(*lead >= 0 && *lead < 1e9))
    return Status::InvalidArgument("notice_lead_seconds must be >= 0");
  w.notice_lead_ms = lead ? SecondsToMs(*lead) : 0;
  return w;
}

// A pool's "storage": an array of path or s3:// prefixes (absent: none).
Result<std::vector<std::string>> StorageField(const RequestBody& b) {
  STINT_ASSIGN_OR_RETURN(const json* a, b.OptionalArray("storage"));
  std::vector<std::string> storage;
  if (a == nullptr) return storage;
  for (const json& x : *a) {
    if (!x.is_string()) return Status::InvalidArgument("storage must be an array of strings");
    storage.push_back(x.get<std::string>());
  }
  return storage;
}

// POST and GET /v1/pools.
void AddPoolRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  routes->Add(Method::kPost, "/v1/pools", Access::kAdmin, [c](const httplib::Request& req) {
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
        req.body, {"name", "description", "pricing", "price_per_gpu_hour", "storage"}));
    Pool p;
    p.name = STINT_HTTP_TRY(b.String("name"));
    p.description = STINT_HTTP_TRY(b.OptionalString("description")).value_or("");
    const std::optional<std::string> pricing = STINT_HTTP_TRY(b.OptionalString("pricing"));
    if (pricing) p.pricing = STINT_HTTP_TRY(ParsePoolPricing(*pricing));
    p.price_per_gpu_hour =
        STINT_HTTP_TRY(b.OptionalNonNegativeNumber("price_per_gpu_hour")).value_or(0);
    p.storage = STINT_HTTP_TRY(StorageField(b));
    Pool out = STINT_HTTP_TRY(c->AddPool(p));
    return Reply{201, ToJson(out), {}, {}};
  });
  // What storage the pool's nodes reach, from now on ([]: undeclared).
  routes->Add(Method::kPut, R"(/v1/pools/([A-Za-z0-9._-]{1,64})/storage)", Access::kAdmin,
              [c](const httplib::Request& req) {
                RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"storage"}));
                if (b.Find("storage") == nullptr)
                  return ErrorReply(Status::InvalidArgument("storage is required"));
                const std::vector<std::string> storage = STINT_HTTP_TRY(StorageField(b));
                Pool out = STINT_HTTP_TRY(c->SetPoolStorage(req.matches[1], storage));
                return Reply{200, ToJson(out), {}, {}};
              });
  // A new price from now on (an admin, or a spot price feed).
  routes->Add(Method::kPost, R"(/v1/pools/([A-Za-z0-9._-]{1,64})/price)", Access::kAdmin,
              [c](const httplib::Request& req) {
                RequestBody b =
                    STINT_HTTP_TRY(RequestBody::Parse(req.body, {"price_per_gpu_hour"}));
                const double price = STINT_HTTP_TRY(b.NonNegativeNumber("price_per_gpu_hour"));
                Pool out = STINT_HTTP_TRY(c->SetPoolPrice(req.matches[1], price));
                return Reply{200, ToJson(out), {}, {}};
              });
  routes->Add(Method::kGet, "/v1/pools", Access::kRead, [c](const httplib::Request&) {
    json pools = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
      for (const auto& [name, p] : s.pools) pools.push_back(ToJson(p));
    });
    return Reply{200, {{"pools", pools}}, {}, {}};
  });
}

// POST and GET /v1/windows, and closing one.
void AddWindowRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  routes->Add(Method::kPost, "/v1/windows", Access::kAdmin, [c](const httplib::Request& req) {
    RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
        req.body, {"pool", "gpus", "start_ms", "end_ms", "kind", "notice_lead_seconds", "nodes"}));
    const json* nodes = STINT_HTTP_TRY(b.OptionalArray("nodes"));
    Window spec = STINT_HTTP_TRY(ParseWindowSpec(b, c->now(), /*gpus_required=*/nodes == nullptr));
    if (nodes != nullptr) {
      // One window per named node (API.md, "Windows on nodes").
      std::vector<Coordinator::DeclaredNode> declared;
      for (const json& n : *nodes) {
        Coordinator::DeclaredNode d;
        const json gpus = n.is_object() ? n.value("gpus", json::array()) : json::array();
        const bool named = n.is_string() || (n.is_object() && n.value("name", json()).is_string());
        if (!named || !gpus.is_array() ||
            (n.is_object() && n.size() != (n.contains("gpus") ? 2u : 1u))) {
          return ErrorReply(Status::InvalidArgument(
              "nodes must be an array of node names or {\"name\",\"gpus\":[indices]?}"));
        }
        d.name = n.is_string() ? n.get<std::string>() : n["name"].get<std::string>();
        for (const json& g : gpus) {
          if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > 1000000)
            return ErrorReply(Status::InvalidArgument("nodes[].gpus must hold GPU indices >= 0"));
          d.gpus.push_back(g.get<int>());
        }
        declared.push_back(std::move(d));
      }
      std::vector<Window> made = STINT_HTTP_TRY(c->AddNodeWindows(spec, declared));
      Reply r{201, {}, {}, {}};
      c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
        json windows = json::array();
        for (const Window& w : made) windows.push_back(ToJson(s, w, now));
        r.body = {{"windows", windows}};
      });
      return r;
    }
    Window w = STINT_HTTP_TRY(c->AddWindow(spec));
    Reply r{201, {}, {}, {}};
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) { r.body = ToJson(s, w, now); });
    return r;
  });
  routes->Add(Method::kGet, "/v1/windows", Access::kRead, [c](const httplib::Request&) {
    json windows = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
      for (const auto& [id, w] : s.windows) windows.push_back(ToJson(s, w, now));
    });
    return Reply{200, {{"windows", windows}}, {}, {}};
  });
  routes->Add(Method::kPost, R"(/v1/windows/(\d+)/close)", Access::kAdmin,
              [c](const httplib::Request& req) {
                const int64_t id = STINT_HTTP_TRY(PathId(req, 1, "window"));
                RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(req.body, {"lead_seconds"}));
                std::optional<double> lead = STINT_HTTP_TRY(b.OptionalNumber("lead_seconds"));
                if (lead && !(*lead >= 0 && *lead < 1e9)) {
                  return ErrorReply(Status::InvalidArgument("lead_seconds must be >= 0"));
                }
                std::optional<TimeMs> lead_ms;
                if (lead) lead_ms = SecondsToMs(*lead);
                Window w = STINT_HTTP_TRY(c->CloseWindow(id, lead_ms));
                Reply r;
                c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
                  r.body = ToJson(s, w, now);
                });
                return r;
              });
}

// PUT /v1/teams/{name} and GET /v1/teams.
void AddTeamRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  routes->Add(
      Method::kPut, R"(/v1/teams/([^/]+))", Access::kAdmin, [c](const httplib::Request& req) {
        RequestBody b = STINT_HTTP_TRY(RequestBody::Parse(
            req.body, {"guaranteed_gpus", "borrow_limit_gpus", "budget", "budget_period_seconds"}));
        Team t;
        t.name = req.matches[1];
        std::optional<int64_t> g = STINT_HTTP_TRY(b.OptionalInt64("guaranteed_gpus"));
        std::optional<int64_t> bl = STINT_HTTP_TRY(b.OptionalInt64("borrow_limit_gpus"));
        std::optional<double> budget = STINT_HTTP_TRY(b.OptionalNumber("budget"));
        std::optional<double> period = STINT_HTTP_TRY(b.OptionalNumber("budget_period_seconds"));
        if ((g && (*g < 0 || *g > 1000000)) || (bl && (*bl < -1 || *bl > 1000000))) {
          return ErrorReply(Status::InvalidArgument(
              "guaranteed_gpus must be 0..1000000 and borrow_limit_gpus -1..1000000"));
        }
        // An update keeps the fields it does not name.
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
          auto it = s.teams.find(t.name);
          if (it != s.teams.end()) t = it->second;
        });
        if (g) t.guaranteed_gpus = static_cast<int>(*g);
        if (bl) t.borrow_limit_gpus = static_cast<int>(*bl);
        if (budget) t.budget = *budget;  // -1: none
        if (period) t.budget_period_seconds = *period;
        Team out = STINT_HTTP_TRY(c->PutTeam(t));
        Reply r;
        c->Read(
            [&](const ClusterState& s, const Plan&, TimeMs now) { r.body = ToJson(s, out, now); });
        return r;
      });
  routes->Add(Method::kGet, "/v1/teams", Access::kRead, [c](const httplib::Request&) {
    json teams = json::array();
    c->Read([&](const ClusterState& s, const Plan&, TimeMs now) {
      for (const auto& [name, t] : s.teams) teams.push_back(ToJson(s, t, now));
    });
    return Reply{200, {{"teams", teams}}, {}, {}};
  });
}

// GET /v1/price-rules and PUT /v1/price-rules/{PRIORITY}: what each
// priority level may pay (PriceRule).
void AddPriceRuleRoutes(Routes* routes) {
  Coordinator* c = routes->coordinator();
  auto rules_json = [](const ClusterState& s) {
    json rules = json::array();
    for (Priority p : {Priority::kLow, Priority::kMedium, Priority::kHigh, Priority::kCritical}) {
      const PriceRule& r = s.price_rules[static_cast<size_t>(p)];
      rules.push_back(
          {{"priority", PriorityName(p)},
           {"max_price_per_gpu_hour",
            r.max_price_per_gpu_hour < 0 ? json(nullptr) : json(r.max_price_per_gpu_hour)},
           {"spot_fallback_revocations", r.spot_fallback_revocations},
           {"spot_fallback_window_seconds", r.spot_fallback_window_seconds}});
    }
    return json{{"rules", rules}};
  };
  routes->Add(
      Method::kGet, "/v1/price-rules", Access::kRead, [c, rules_json](const httplib::Request&) {
        Reply r;
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) { r.body = rules_json(s); });
        return r;
      });
  routes->Add(
      Method::kPut, R"(/v1/price-rules/([A-Za-z]+))", Access::kAdmin,
      [c, rules_json](const httplib::Request& req) {
        const Priority priority = STINT_HTTP_TRY(ParsePriority(req.matches[1].str()));
        RequestBody b = STINT_HTTP_TRY(
            RequestBody::Parse(req.body, {"max_price_per_gpu_hour", "spot_fallback_revocations",
                                          "spot_fallback_window_seconds"}));
        const std::optional<double> cap =
            STINT_HTTP_TRY(b.OptionalNumber("max_price_per_gpu_hour"));
        const std::optional<int64_t> revocations =
            STINT_HTTP_TRY(b.OptionalInt64("spot_fallback_revocations"));
        const std::optional<double> window =
            STINT_HTTP_TRY(b.OptionalNumber("spot_fallback_window_seconds"));
        if (revocations && (*revocations < 0 || *revocations > 1000000))
          return ErrorReply(
              Status::InvalidArgument("spot_fallback_revocations must be 0..1000000"));
        // A rule keeps the fields a request does not name.
        PriceRule rule;
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) {
          rule = s.price_rules[static_cast<size_t>(priority)];
        });
        if (cap) rule.max_price_per_gpu_hour = *cap;
        if (revocations) rule.spot_fallback_revocations = static_cast<int>(*revocations);
        if (window) rule.spot_fallback_window_seconds = *window;
        const Status set = c->SetPriceRule(priority, rule);
        if (!set.ok()) return ErrorReply(set);
        Reply r;
        c->Read([&](const ClusterState& s, const Plan&, TimeMs) { r.body = rules_json(s); });
        return r;
      });
}

}  // namespace

void InstallWindowRoutes(Routes* routes) {
  AddPoolRoutes(routes);
  AddWindowRoutes(routes);
  AddTeamRoutes(routes);
  AddPriceRuleRoutes(routes);
}

}  // namespace stint::stintd
