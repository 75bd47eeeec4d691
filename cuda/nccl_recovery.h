// The NCCL recovery ladder: what this process may do with a communicator
// whose group lost ranks, chosen at run time from the loaded library's
// version (ncclGetVersion), not the headers it was built against
// (research/elastic_anchors.md §2, §5.2, §5.10):
//
//   shrink   ncclCommShrink(NCCL_SHRINK_ABORT) by the survivors, then
//            ncclCommAbort of the parent (never Destroy: hangs on 2.31+).
//            NCCL >= 2.27.3.
//   revoke   ncclCommRevoke quiesces a communicator without freeing it, so
//            it can still be shrunk. NCCL >= 2.28.7. Reported here; the
//            communicator does not revoke yet (see NcclRecoveryPlan::revoke).
//   re-init  ncclCommAbort of every communicator and a fresh
//            ncclCommInitRankConfig: every version.
//
//   restart  the process exits and is started again (the launcher or
//            stint-agent does it); it rejoins the job. Every version; the
//            only rung before 2.26.2.
//
// NCCL 2.28.3 to 2.28.8 segfault in in-process restart (NVRx's known
// issue); on them shrink and revoke are off. Before 2.26.2 ncclCommAbort
// can hang in NCCL's own threads when peers are gone (fixed there), and
// every in-process rung needs an abort: there a communicator is never
// aborted. Releasing one (Abort(), a failed call, its destructor) leaves
// the handle, its threads, its stream and its buffers unreleased until the
// process exits, and the factory reports RestartRequired(): ElasticGroup
// then returns kFailedPrecondition ("restart the process") instead of
// forming the next generation in the same process.
//
// Pure functions; thread-safe. Internal to cuda/ (and its tests).
#ifndef STINT_CUDA_NCCL_RECOVERY_H_
#define STINT_CUDA_NCCL_RECOVERY_H_

#include <string>

namespace stint {

// NCCL_VERSION(X, Y, Z) as nccl.h computes it: X*1000+Y*100+Z up to 2.8,
// X*10000+Y*100+Z from 2.9 on (the same test as nccl.h). Here so that the
// ladder needs no nccl.h.
constexpr int NcclVersionCode(int major, int minor, int patch) {
  return (major <= 2 && minor <= 8) ? major * 1000 + minor * 100 + patch
                                    : major * 10000 + minor * 100 + patch;
}

// "2.28.9" for NcclVersionCode(2, 28, 9) (either encoding).
std::string NcclVersionText(int code);

struct NcclRecoveryPlan {
  int version = 0;  // the code it was made for
  // Survivors of a rank loss may shrink the old communicator in place.
  bool shrink = false;
  // ncclCommRevoke is available and not on a version known broken. The
  // ElasticGroup shrinks only a communicator whose every collective
  // completed (a boundary where the agreement succeeded), which needs no
  // revoke; revoking a communicator whose collective failed, so that it can
  // be shrunk instead of re-initialized, is the intended use and is not
  // wired in yet.
  bool revoke = false;
  // 2.28.3 to 2.28.8: in-process restart segfaults; shrink and revoke off.
  bool known_broken = false;
  // < 2.26.2: ncclCommAbort may hang in NCCL's own threads.
  bool abort_may_hang = false;
  // ncclCommAbort may be called, so a communicator can be released and a
  // new one formed in this process (re-init). False where the abort may
  // hang: a communicator is then left unreleased, and recovering needs a
  // process restart.
  bool reinit = false;
  // One line: the version and the rungs, e.g. "NCCL 2.28.9: shrink,
  // revoke, re-init, restart".
  std::string summary;
};

// The ladder for the library whose ncclGetVersion() is `version_code`.
NcclRecoveryPlan PlanNcclRecovery(int version_code);

}  // namespace stint

#endif  // STINT_CUDA_NCCL_RECOVERY_H_
