#include "stintd/server/json_model.h"

#include <algorithm>
#include <utility>

namespace stint::stintd {

json TimeJson(TimeMs t) { return t == kNever ? json(nullptr) : json(t); }

json ToJson(const Pool& p) {
  json history = json::array();
  for (const PricePoint& h : p.price_history)
    history.push_back({{"at_ms", h.at_ms}, {"price_per_gpu_hour", h.price_per_gpu_hour}});
  return {{"name", p.name},
          {"description", p.description},
          {"pricing", PoolPricingName(p.pricing)},
          {"price_per_gpu_hour", p.price_per_gpu_hour},
          {"price_history", history},
          {"storage", p.storage}};
}

json ToJson(const ClusterState& s, const Window& w, TimeMs now) {
  int allocated = 0;
  for (const auto& [id, seg] : s.segments) {
    if (!SegmentActive(seg.state)) continue;
    for (const Allocation& a : seg.allocs) {
      if (a.window_id == w.id) allocated += a.gpus;
    }
  }
  return {{"id", w.id},
          {"pool", w.pool},
          {"gpus", w.gpus},
          {"start_ms", w.start_ms},
          {"end_ms", TimeJson(w.end_ms)},
          {"kind", WindowKindName(w.kind)},
          {"notice_lead_seconds", w.notice_lead_ms / 1000.0},
          {"closed_early", w.closed_early},
          {"open", w.open_at(now)},
          {"allocated_gpus", allocated},
          {"node", w.node.empty() ? json(nullptr) : json(w.node)},
          {"node_gpus", w.node_gpus},
          {"node_addr", w.node_addr},
          {"declared", w.declared},
          {"joined", w.joined}};
}

json ToJson(const ClusterState& s, const Team& t, TimeMs now) {
  int allocated = 0;
  double burn_per_second = 0;  // what its active segments are charged now
  json cost_by_job = json::object();
  for (const auto& [id, seg] : s.segments) {
    if (!SegmentActive(seg.state)) continue;
    auto job = s.jobs.find(seg.job_id);
    if (job == s.jobs.end() || job->second.team != t.name) continue;
    allocated += seg.gpus();
    burn_per_second += seg.gpus() * seg.price_per_gpu_hour / 3600.0;
  }
  for (const auto& [id, j] : s.jobs) {
    if (j.team == t.name && j.cost > 0) cost_by_job[std::to_string(id)] = j.cost;
  }
  const TimeMs period_end = t.period_start_ms + SecondsToMs(t.budget_period_seconds);
  const double forecast =
      t.spent + burn_per_second * std::max<TimeMs>(0, period_end - now) / 1000.0;
  return {{"name", t.name},
          {"guaranteed_gpus", t.guaranteed_gpus},
          {"borrow_limit_gpus", t.borrow_limit_gpus},
          {"usage_gpu_seconds", t.usage_gpu_seconds},
          {"allocated_gpus", allocated},
          {"budget", t.budget < 0 ? json(nullptr) : json(t.budget)},
          {"budget_period_seconds", t.budget_period_seconds},
          {"period_start_ms", t.period_start_ms},
          {"period_end_ms", period_end},
          {"spent", t.spent},
          {"left", t.budget < 0 ? json(nullptr) : json(t.budget - t.spent)},
          {"spend_per_hour", burn_per_second * 3600.0},
          {"forecast", forecast},
          {"cost_by_job", cost_by_job}};
}

namespace {
// Where the job's steps are, newest step first.
json StoredJson(const std::map<std::string, StoredStep>& stored) {
  std::vector<std::pair<std::string, StoredStep>> v(stored.begin(), stored.end());
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.second.step > b.second.step; });
  json a = json::array();
  for (const auto& [location, at] : v) {
    a.push_back({{"location", location},
                 {"step", at.step},
                 {"tier", at.tier},
                 {"bytes", at.bytes},
                 {"pool", at.pool},
                 {"segment_id", at.segment_id},
                 {"at_ms", at.at_ms}});
  }
  return a;
}

json StepSecondsJson(const std::map<int, StepTime>& step_time) {
  json o = json::object();
  for (const auto& [gpus, t] : step_time) o[std::to_string(gpus)] = t.pace();
  return o;
}
}  // namespace

json ToJson(const Job& j) {
  json launch = nullptr;
  if (!j.launch.empty()) launch = json::parse(j.launch, nullptr, /*allow_exceptions=*/false);
  json eval = nullptr;
  if (!j.eval.empty()) eval = json::parse(j.eval, nullptr, /*allow_exceptions=*/false);
  return {{"launch", launch.is_discarded() ? json(nullptr) : launch},
          {"eval", eval.is_discarded() ? json(nullptr) : eval},
          {"checkpoints", j.checkpoints},
          {"recent_crashes", j.crash_ms.size()},
          {"id", j.id},
          {"name", j.name},
          {"team", j.team},
          {"pool", JoinPoolNames(j.pools)},
          {"pools", j.pools},
          {"cost", j.cost},
          {"samples", j.samples},
          {"step_seconds", StepSecondsJson(j.step_time)},
          {"recent_revocations", j.revoked_ms.size()},
          {"priority", PriorityName(j.priority)},
          {"min_gpus", j.min_gpus},
          {"max_gpus", j.max_gpus},
          {"gang", j.gang},
          {"preemptible", j.preemptible},
          {"checkpoint_seconds", j.checkpoint_seconds},
          {"restart_seconds", j.restart_seconds},
          {"checkpoint_interval_seconds", j.checkpoint_interval_seconds},
          {"remaining_seconds", j.remaining_seconds},
          {"submit_ms", j.submit_ms},
          {"eligible_ms", j.eligible_ms},
          {"state", JobStateName(j.state)},
          {"segment_id", j.segment_id},
          {"fencing_token", j.fencing_token},
          {"last_step", j.last_step},
          {"checkpoint_step", j.checkpoint_step},
          {"checkpoint_ms", j.checkpoint_ms},
          {"segments", j.segments},
          {"preemptions", j.preemptions},
          {"lost_gpu_seconds", j.lost_gpu_seconds},
          {"service_gpu_seconds", j.service_gpu_seconds},
          {"stored", StoredJson(j.stored)},
          {"message", j.message}};
}

namespace {
json MembersJson(const std::vector<RendezvousMember>& members) {
  json a = json::array();
  for (const RendezvousMember& m : members) {
    a.push_back({{"worker_id", m.worker_id}, {"endpoint", m.endpoint}, {"rank", m.rank}});
  }
  return a;
}
}  // namespace

json ToJson(const Rendezvous& r) {
  return {{"generation", r.generation},
          {"phase", RendezvousPhaseName(r.phase)},
          {"members", MembersJson(r.members)},
          {"previous", r.previous},
          {"dropped", r.dropped},
          {"opened_ms", r.opened_ms},
          {"last_call_ms", r.last_call_ms},
          {"formed_ms", r.formed_ms}};
}

json ToJson(const RendezvousView& v) {
  return {{"job_id", v.job_id},
          {"generation", v.generation},
          {"phase", RendezvousPhaseName(v.phase)},
          {"member", v.member},
          {"standby", v.standby},
          {"rank", v.rank},
          {"world_size", v.world_size},
          {"min_workers", v.min_workers},
          {"max_workers", v.max_workers},
          {"master_endpoint", v.master_endpoint},
          {"members", MembersJson(v.members)},
          {"previous", v.previous},
          {"last_call_ms", v.last_call_ms},
          {"formed_ms", v.formed_ms}};
}

json ToJson(const Segment& seg) {
  json allocs = json::array();
  for (const Allocation& a : seg.allocs)
    allocs.push_back({{"window_id", a.window_id}, {"gpus", a.gpus}});
  json placement = json::array();
  for (const Placement& p : seg.placement)
    placement.push_back({{"window_id", p.window_id}, {"gpus", p.gpus}});
  json shrink = nullptr;
  if (seg.shrink_deadline_ms != 0) {
    json release = json::array();
    for (const Allocation& a : seg.shrink_release)
      release.push_back({{"window_id", a.window_id}, {"gpus", a.gpus}});
    shrink = {{"release", release},
              {"leaving_workers", seg.leaving_workers},
              {"notice_ms", seg.shrink_notice_ms},
              {"deadline_ms", seg.shrink_deadline_ms},
              {"for_job_id", seg.shrink_for}};
  }
  return {{"placement", placement},
          {"shrink", shrink},
          {"id", seg.id},
          {"job_id", seg.job_id},
          {"allocs", allocs},
          {"gpus", seg.gpus()},
          {"fencing_token", seg.fencing_token},
          {"start_ms", seg.start_ms},
          {"planned_end_ms", TimeJson(seg.planned_end_ms)},
          {"state", SegmentStateName(seg.state)},
          {"notice_reason", NoticeReasonName(seg.notice_reason)},
          {"notice_ms", seg.notice_ms},
          {"deadline_ms", seg.deadline_ms},
          {"preempted_for", seg.preempted_for},
          {"ended_ms", seg.ended_ms},
          {"master_port", seg.master_port},
          {"price_per_gpu_hour", seg.price_per_gpu_hour},
          {"cost", seg.cost},
          {"start_step", seg.start_step},
          {"checkpoint_step", seg.checkpoint_step},
          {"last_step", seg.last_step},
          {"notice_to_replicas_seconds", seg.notice_to_replicas_seconds < 0
                                             ? json(nullptr)
                                             : json(seg.notice_to_replicas_seconds)}};
}

json ToJson(const JobFigures& f) {
  json segments = json::array();
  for (const SegmentFigures& g : f.segments) {
    segments.push_back({{"segment_id", g.segment_id},
                        {"gpus", g.gpus},
                        {"held_gpu_seconds", g.held_gpu_seconds},
                        {"useful_gpu_seconds", g.useful_gpu_seconds},
                        {"restart_gpu_seconds", g.restart_gpu_seconds},
                        {"checkpoint_gpu_seconds", g.checkpoint_gpu_seconds},
                        {"lost_gpu_seconds", g.lost_gpu_seconds},
                        {"kept_steps", g.kept_steps},
                        {"efficiency", g.efficiency},
                        {"cost", g.cost}});
  }
  return {{"held_gpu_seconds", f.held_gpu_seconds},
          {"useful_gpu_seconds", f.useful_gpu_seconds},
          {"restart_gpu_seconds", f.restart_gpu_seconds},
          {"checkpoint_gpu_seconds", f.checkpoint_gpu_seconds},
          {"lost_gpu_seconds", f.lost_gpu_seconds},
          {"kept_steps", f.kept_steps},
          {"efficiency", f.efficiency},
          {"cost", f.cost},
          {"cost_per_step", f.cost_per_step},
          {"segments", segments}};
}

json LossCurveJson(const ClusterState& s, const Job& j) {
  json points = json::array();
  for (const LossPoint& p : j.losses) points.push_back({p.step, p.loss, p.segment_id, p.at_ms});
  json segments = json::array();
  for (const auto& [id, seg] : s.segments) {
    if (seg.job_id != j.id) continue;
    segments.push_back({{"id", seg.id},
                        {"start_ms", seg.start_ms},
                        {"start_step", std::max<int64_t>(0, seg.start_step)},
                        {"gpus", seg.gpus()}});
  }
  return {{"job_id", j.id}, {"points", points}, {"segments", segments}, {"evals", EvalsOf(s, j)}};
}

json ToJson(const EvalTask& e) {
  json result = nullptr;
  if (!e.result.empty()) result = json::parse(e.result, nullptr, /*allow_exceptions=*/false);
  return {{"id", e.id},
          {"step", e.step},
          {"state", EvalStateName(e.state)},
          {"result", result.is_discarded() ? json(nullptr) : result},
          {"node", e.node},
          {"gpu", e.gpu < 0 ? json(nullptr) : json(e.gpu)},
          {"attempts", e.attempts},
          {"created_ms", e.created_ms},
          {"started_ms", e.started_ms},
          {"ended_ms", e.ended_ms},
          {"message", e.message}};
}

json EvalsOf(const ClusterState& s, const Job& j) {
  json evals = json::array();
  for (const auto& [id, e] : s.evals) {
    if (e.job_id == j.id) evals.push_back(ToJson(e));
  }
  return evals;
}

json ToJson(const WorkerView& v) {
  json notice = nullptr;
  if (v.notice_reason != NoticeReason::kNone) {
    notice = {{"reason", NoticeReasonName(v.notice_reason)},
              {"deadline_ms", v.deadline_ms},
              {"notice_ms", v.notice_ms}};
  }
  return {{"active", v.active},
          {"fencing_token", v.fencing_token},
          {"segment_id", v.segment_id},
          {"segment_state", SegmentStateName(v.segment_state)},
          {"notice", notice}};
}

json ToJson(const KvRecord& e) {
  return {{"key", e.key}, {"value", e.value}, {"version", e.version}, {"updated_ms", e.updated_ms}};
}

json ToJson(const ClusterState& s, const PendingInfo& p, TimeMs now) {
  json out = {{"position", p.position},
              {"job_id", p.job_id},
              {"reason", BlockReasonName(p.reason)},
              {"detail", p.detail},
              {"planned_start_ms", TimeJson(p.planned_start_ms)},
              {"planned_gpus", p.planned_gpus},
              {"score", p.score},
              {"score_level", p.score_level},
              {"score_aging", p.score_aging},
              {"score_guarantee", p.score_guarantee},
              {"score_fair_share", p.score_fair_share},
              {"score_service", p.score_service},
              {"service_class", p.service_class}};
  auto job = s.jobs.find(p.job_id);
  if (job != s.jobs.end()) {
    const Job& j = job->second;
    out["name"] = j.name;
    out["team"] = j.team;
    out["priority"] = PriorityName(j.priority);
    out["min_gpus"] = j.min_gpus;
    out["max_gpus"] = j.max_gpus;
    out["wait_seconds"] = std::max<TimeMs>(0, now - j.eligible_ms) / 1000.0;
  }
  return out;
}

json ToJson(const PlanStats& st) {
  return {{"open_window_gpus", st.open_window_gpus},
          {"allocated_gpus", st.allocated_gpus},
          {"free_gpus", st.free_gpus},
          {"fragmented_gpus", st.fragmented_gpus},
          {"pending_jobs", st.pending_jobs},
          {"running_jobs", st.running_jobs}};
}

namespace {
constexpr internal::JsonFieldPolicy kRequestFields{/*null_is_absent=*/true,
                                                   internal::JsonFieldPolicy::Floats::kIfIntegral,
                                                   internal::DefaultJsonFieldError};
}  // namespace

RequestBody::RequestBody(std::unique_ptr<const json> j)
    : JsonFields(*j, "", kRequestFields), j_(std::move(j)) {}

Result<RequestBody> RequestBody::Parse(const std::string& body,
                                       std::initializer_list<const char*> allowed) {
  auto j = std::make_unique<json>();
  if (body.empty()) {
    *j = json::object();
  } else {
    *j = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j->is_discarded()) return Status::InvalidArgument("request body is not valid JSON");
  }
  if (!j->is_object()) return Status::InvalidArgument("request body must be a JSON object");
  for (const auto& item : j->items()) {
    bool known = false;
    for (const char* a : allowed) known = known || item.key() == a;
    if (!known) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      return Status::InvalidArgument("unknown field \"" + item.key() + "\" (allowed: " + list +
                                     ")");
    }
  }
  return RequestBody(std::move(j));
}

}  // namespace stint::stintd
