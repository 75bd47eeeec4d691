#include "common/gpu_list.h"

#include <cstdlib>

namespace stint {
namespace tools {

Result<std::vector<int>> ParseGpuList(const std::string& text) {
  std::vector<std::string> parts(1);
  for (char ch : text) {
    if (ch == ',')
      parts.emplace_back();
    else
      parts.back() += ch;
  }
  std::vector<int> gpus;
  for (const std::string& part : parts) {
    char* end = nullptr;
    const long g = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || g < 0 || g > 1000000)
      return Status::InvalidArgument("\"" + part + "\" is not a GPU index");
    gpus.push_back(static_cast<int>(g));
  }
  return gpus;
}

}  // namespace tools
}  // namespace stint
