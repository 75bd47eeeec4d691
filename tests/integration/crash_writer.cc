// crash_writer ROOT ENGINE: resumes from the newest checkpoint in ROOT (if
// any) and saves StepState(step) for step = resumed + 1, + 2, ... forever,
// printing "durable N" after each commit. kill_test SIGKILLs it at random.
#include <cstdio>
#include <cstdlib>

#include "stint/checkpointer.h"
#include "util/step_state.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: crash_writer ROOT ENGINE\n");
    return 2;
  }
  stint::CheckpointOptions o;
  o.root = argv[1];
  o.io_engine = argv[2];
  o.chunk_size = 256 * 1024;
  o.io_size = 256 * 1024;
  o.keep_last = 2;
  auto ckpt = stint::Checkpointer::Open(o);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "open: %s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  uint64_t step = 0;
  stint::StepState probe(0, 5000);
  auto loaded = (*ckpt)->Load(probe.Dests());
  if (loaded.ok()) {
    if (!probe.SameData(stint::StepState(loaded->step, 5000))) {
      std::fprintf(stderr, "resumed step %llu has wrong contents\n",
                   (unsigned long long)loaded->step);
      return 1;
    }
    step = loaded->step;
  } else if (loaded.status().code() != stint::Code::kNotFound) {
    std::fprintf(stderr, "load: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  for (;;) {
    ++step;
    stint::StepState s(step, 5000);  // ~2 MiB
    auto h = (*ckpt)->Save(step, s.AsState());
    if (!h.ok()) {
      std::fprintf(stderr, "save: %s\n", h.status().ToString().c_str());
      return 1;
    }
    stint::Status d = h->durable.get();
    if (!d.ok()) {
      std::fprintf(stderr, "durable: %s\n", d.ToString().c_str());
      return 1;
    }
    std::printf("durable %llu\n", (unsigned long long)step);
    std::fflush(stdout);
  }
}
