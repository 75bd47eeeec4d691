#include "util/temp_dir.h"

#include <cstdlib>
#include <stdexcept>

#include "stint/env.h"

namespace stint {

TempDir::TempDir() {
  const char* base = std::getenv("STINT_TEST_DIR");
  if (base == nullptr) base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/var/tmp") + "/stint-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() { RemoveRecursively(Env::Default(), path_).IgnoreError(); }

}  // namespace stint
