// stintctl's human views of stintd's answers (the JSON objects of API.md):
// aligned tables, times relative to `now_ms` with their UTC. Never throws on
// a field that is missing or of another type: it shows "-" instead, so an
// older or newer stintd still gets a readable table.
#ifndef STINT_TOOLS_STINTCTL_RENDER_H_
#define STINT_TOOLS_STINTCTL_RENDER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace stint {
namespace ctl {

using Json = nlohmann::json;

std::string RenderPools(const Json& reply);                      // {"pools":[...]}
std::string RenderWindows(const Json& reply, int64_t now_ms);    // {"windows":[...]}
std::string RenderTeams(const Json& reply);                      // {"teams":[...]}
std::string RenderJobs(const Json& reply, int64_t now_ms);       // {"jobs":[...]}
std::string RenderJob(const Json& job, int64_t now_ms);          // GET /v1/jobs/{id}
std::string RenderSegments(const Json& reply, int64_t now_ms);   // {"segments":[...]}
// GET /v1/queue; times are relative to the answer's own now_ms.
std::string RenderQueue(const Json& reply);

// One cell: a string as is ("-" when empty), a number (integers without ".0"), true/false as
// yes/no, null or missing as "-".
std::string Cell(const Json& object, const char* key);
// "4" or "2-8" from min_gpus/max_gpus.
std::string GpuRangeCell(const Json& job);
// "w3:2,w5:6" from a segment's allocs.
std::string AllocsCell(const Json& segment);
// A *_ms field as FormatWhen, "-" for null, missing or 0.
std::string TimeCell(const Json& object, const char* key, int64_t now_ms);

}  // namespace ctl
}  // namespace stint

#endif  // STINT_TOOLS_STINTCTL_RENDER_H_
