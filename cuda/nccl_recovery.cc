#include "nccl_recovery.h"

namespace stint {
namespace {

constexpr int kShrinkSince = NcclVersionCode(2, 27, 3);
constexpr int kRevokeSince = NcclVersionCode(2, 28, 7);
constexpr int kBrokenFrom = NcclVersionCode(2, 28, 3);
constexpr int kBrokenThrough = NcclVersionCode(2, 28, 8);
constexpr int kAbortFixedIn = NcclVersionCode(2, 26, 2);

}  // namespace

std::string NcclVersionText(int code) {
  // Codes below 10000 are the old encoding (X*1000+Y*100+Z, Y <= 8).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

NcclRecoveryPlan PlanNcclRecovery(int version_code) {
  NcclRecoveryPlan plan;
  plan.version = version_code;
  plan.known_broken = version_code >= kBrokenFrom && version_code <= kBrokenThrough;
  plan.shrink = version_code >= kShrinkSince && !plan.known_broken;
  plan.revoke = version_code >= kRevokeSince && !plan.known_broken;
  plan.abort_may_hang = version_code < kAbortFixedIn;
  plan.reinit = !plan.abort_may_hang;
  plan.summary = "NCCL " + NcclVersionText(version_code) + ": ";
  if (plan.shrink) plan.summary += "shrink, ";
  if (plan.revoke) plan.summary += "revoke, ";
  if (plan.reinit) plan.summary += "re-init, ";
  plan.summary += "restart";
  if (plan.known_broken) {
    plan.summary += " (2.28.3-2.28.8 segfault in in-process restart: shrink and revoke disabled)";
  } else if (version_code < kShrinkSince) {
    plan.summary += " (ncclCommShrink needs 2.27.3)";
  }
  if (plan.abort_may_hang) {
    plan.summary +=
        " (ncclCommAbort may hang before 2.26.2: communicators are left unreleased, recovery "
        "restarts the process)";
  }
  return plan;
}

}  // namespace stint
