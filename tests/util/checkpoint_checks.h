// Checks shared by the crash tests: what must hold after any fault; and
// the damage the corruption tests do.
#ifndef STINT_TESTS_UTIL_CHECKPOINT_CHECKS_H_
#define STINT_TESTS_UTIL_CHECKPOINT_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace stint {

// Opens `root` with the real Env (which cleans leftovers), loads the newest
// checkpoint of StepState tensors and expects: it loads without skipping
// anything, its step is in `allowed`, its bytes are exactly StepState(step)'s,
// every committed checkpoint verifies in full and no .tmp-* entry is left.
// Reports the loaded step through `loaded` when not null.
void ExpectNewestLoadsOneOf(const std::string& root, const std::vector<uint64_t>& allowed,
                            const char* engine, uint64_t* loaded = nullptr, int64_t rows = 200);

// Flips one bit (0x40) of the byte at `offset` of `path` in place: damage a
// checksum must catch. A gtest failure when the file cannot be changed.
void FlipByte(const std::string& path, uint64_t offset);

}  // namespace stint

#endif  // STINT_TESTS_UTIL_CHECKPOINT_CHECKS_H_
