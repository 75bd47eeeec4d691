#include "stintd/core/model.h"

#include <algorithm>
#include <cctype>

namespace stint::stintd {
namespace {

std::string Upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

}  // namespace

const char* PriorityName(Priority p) {
  switch (p) {
    case Priority::kLow:
      return "LOW";
    case Priority::kMedium:
      return "MEDIUM";
    case Priority::kHigh:
      return "HIGH";
    case Priority::kCritical:
      return "CRITICAL";
  }
  return "UNKNOWN";
}

Result<Priority> ParsePriority(std::string_view s) {
  const std::string u = Upper(s);
  for (Priority p : {Priority::kLow, Priority::kMedium, Priority::kHigh, Priority::kCritical}) {
    if (u == PriorityName(p)) return p;
  }
  return Status::InvalidArgument("priority must be LOW, MEDIUM, HIGH or CRITICAL (got \"" +
                                 std::string(s) + "\")");
}

const char* WindowKindName(WindowKind k) { return k == WindowKind::kHard ? "hard" : "spot"; }

Result<WindowKind> ParseWindowKind(std::string_view s) {
  const std::string u = Upper(s);
  if (u == "HARD") return WindowKind::kHard;
  if (u == "SPOT") return WindowKind::kSpot;
  return Status::InvalidArgument("window kind must be hard or spot (got \"" + std::string(s) +
                                 "\")");
}

const char* PoolPricingName(PoolPricing p) {
  switch (p) {
    case PoolPricing::kOnDemand:
      return "on_demand";
    case PoolPricing::kSpot:
      return "spot";
    case PoolPricing::kOnPrem:
      return "on_prem";
  }
  return "unknown";
}

Result<PoolPricing> ParsePoolPricing(std::string_view s) {
  const std::string u = Upper(s);
  for (PoolPricing p : {PoolPricing::kOnDemand, PoolPricing::kSpot, PoolPricing::kOnPrem}) {
    if (u == Upper(PoolPricingName(p))) return p;
  }
  return Status::InvalidArgument("pricing must be on_demand, spot or on_prem (got \"" +
                                 std::string(s) + "\")");
}

std::string JoinPoolNames(const std::vector<std::string>& pools) {
  std::string out;
  for (const std::string& p : pools) out += (out.empty() ? "" : ",") + p;
  return out;
}

std::vector<std::string> SplitPoolNames(std::string_view text) {
  std::vector<std::string> pools;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    if (end > begin) pools.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return pools;
}

const char* EvalStateName(EvalState s) {
  switch (s) {
    case EvalState::kPending:
      return "pending";
    case EvalState::kRunning:
      return "running";
    case EvalState::kDone:
      return "done";
    case EvalState::kFailed:
      return "failed";
    case EvalState::kSuperseded:
      return "superseded";
  }
  return "unknown";
}

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kDone:
      return "DONE";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

const char* SegmentStateName(SegmentState s) {
  switch (s) {
    case SegmentState::kRunning:
      return "running";
    case SegmentState::kNotified:
      return "notified";
    case SegmentState::kEnded:
      return "ended";
    case SegmentState::kCompleted:
      return "completed";
    case SegmentState::kLost:
      return "lost";
    case SegmentState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

const char* NoticeReasonName(NoticeReason r) {
  switch (r) {
    case NoticeReason::kNone:
      return "none";
    case NoticeReason::kWindowClose:
      return "window_close";
    case NoticeReason::kRevoked:
      return "revoked";
    case NoticeReason::kPreempted:
      return "preempted";
    case NoticeReason::kCancelled:
      return "cancelled";
    case NoticeReason::kShrink:
      return "shrink";
    case NoticeReason::kBudget:
      return "budget";
    case NoticeReason::kMigrate:
      return "migrate";
  }
  return "unknown";
}

const char* RendezvousPhaseName(RendezvousPhase p) {
  return p == RendezvousPhase::kJoining ? "joining" : "formed";
}

}  // namespace stint::stintd
