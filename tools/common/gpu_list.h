// A list of GPU indices on one machine as the tools' command lines take it:
// stint-agent's --gpus 0,1,2,3 and stintctl's --node NAME:0,1,2,3.
#ifndef STINT_TOOLS_COMMON_GPU_LIST_H_
#define STINT_TOOLS_COMMON_GPU_LIST_H_

#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {
namespace tools {

// "0,1,2,3": comma-separated indices in [0, 1000000], in the order given.
// kInvalidArgument, quoting the piece, when a piece is empty or not such an
// index (so "" and "0,1," are refused).
Result<std::vector<int>> ParseGpuList(const std::string& text);

}  // namespace tools
}  // namespace stint

#endif  // STINT_TOOLS_COMMON_GPU_LIST_H_
