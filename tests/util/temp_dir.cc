#include "util/temp_dir.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
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

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  out.close();
  return static_cast<bool>(out);
}

}  // namespace stint
