#include "checkpoint/foreground_gate.h"

namespace stint {

ForegroundGate::Hold::Hold(ForegroundGate* gate) : gate_(gate) {
  std::lock_guard<std::mutex> lock(gate_->mu_);
  ++gate_->saves_;
}

ForegroundGate::Hold::~Hold() {
  {
    std::lock_guard<std::mutex> lock(gate_->mu_);
    --gate_->saves_;
  }
  gate_->idle_cv_.notify_all();
}

void ForegroundGate::Yield(std::chrono::milliseconds patience) const {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait_for(lock, patience, [this] { return saves_ == 0; });
}

}  // namespace stint
