// TempDir: a fresh directory under $TMPDIR (or /tmp), removed with its
// contents on destruction. Set STINT_TEST_DIR to test on another file system.
// ReadWholeFile/WriteWholeFile: a test's raw bytes in and out of a file.
#ifndef STINT_TESTS_UTIL_TEMP_DIR_H_
#define STINT_TESTS_UTIL_TEMP_DIR_H_

#include <string>

namespace stint {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The file's bytes; "" when it cannot be read.
std::string ReadWholeFile(const std::string& path);
// Replaces the file's contents; false when it cannot be written.
bool WriteWholeFile(const std::string& path, const std::string& bytes);

}  // namespace stint

#endif  // STINT_TESTS_UTIL_TEMP_DIR_H_
