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

std::string RenderPools(const Json& reply);                     // {"pools":[...]}
std::string RenderWindows(const Json& reply, int64_t now_ms);   // {"windows":[...]}
std::string RenderTeams(const Json& reply, int64_t now_ms);     // {"teams":[...]}
std::string RenderPriceRules(const Json& reply);                // {"rules":[...]}
std::string RenderJobs(const Json& reply, int64_t now_ms);      // {"jobs":[...]}
std::string RenderJob(const Json& job, int64_t now_ms);         // GET /v1/jobs/{id}
std::string RenderSegments(const Json& reply, int64_t now_ms);  // {"segments":[...]}
std::string RenderNodes(const Json& reply);                      // {"nodes":[...]}
// GET /v1/queue; times are relative to the answer's own now_ms.
std::string RenderQueue(const Json& reply);
// `stintctl status`: one screen of counts from GET /v1/queue, /v1/jobs and
// /v1/windows, each the number /metrics exports under the name in brackets:
//   jobs      1 pending, 2 running, 1 done, 0 cancelled, 0 failed   [stintd_jobs{state}]
//   gpus      12 open, 6 allocated, 6 free, 0 fragmented           [stintd_gpus{state}]
//   windows   2 open, 0 upcoming, 1 closed (1 closed early)        [stintd_windows_open]
//   pending   0 LOW, 1 MEDIUM, 0 HIGH, 0 CRITICAL; blocked: 1 priority
//             [stintd_queue_length{priority}; stintd_queue_blocked{reason}]
// Windows are open/upcoming/closed at the queue answer's now_ms.
std::string RenderStatus(const Json& queue, const Json& jobs, const Json& windows,
                         const Json& leader);

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
