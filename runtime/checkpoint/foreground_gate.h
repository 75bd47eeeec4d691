// ForegroundGate: background copies (tier 2, peer replicas) give way to the
// training thread's Save(). While a Save() runs, the copy threads wait
// between pieces: on a node whose cores, memory bandwidth and disk the copy
// shares with the snapshot, every byte copied then lengthens the training's
// stall, and a copy loses nothing by starting its next piece a moment later.
//
// Thread-safe.
#ifndef STINT_RUNTIME_CHECKPOINT_FOREGROUND_GATE_H_
#define STINT_RUNTIME_CHECKPOINT_FOREGROUND_GATE_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace stint {

class ForegroundGate {
 public:
  // A Save() in progress, from its construction to its destruction.
  class Hold {
   public:
    explicit Hold(ForegroundGate* gate);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    ForegroundGate* const gate_;
  };

  // Before each piece of background work: returns once no Save() runs, or
  // after `patience` (a copy is slowed by saves, never starved by them).
  void Yield(std::chrono::milliseconds patience = std::chrono::seconds(30)) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable idle_cv_;
  int saves_ = 0;  // guarded by mu_
};

}  // namespace stint

#endif  // STINT_RUNTIME_CHECKPOINT_FOREGROUND_GATE_H_
