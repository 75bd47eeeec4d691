// GET /dashboard: one self-contained HTML page (inline CSS and plain JS,
// nothing loaded from elsewhere, no build step) that draws stintd's state:
// a timeline of each pool's windows with the jobs' segments inside them,
// the queue with why each job waits, and the stintd_* samples of /metrics.
// The page is dashboard.html beside this file, compiled in unchanged.
//
// The page itself holds no data, so it is served without a token. Its script
// reads the token from the URL fragment (/dashboard#token=...; browsers never
// send the fragment to the server) and fetches the read-only views with
// "Authorization: Bearer <token>" every 2 s; a worker token suffices.
//
// Stable hooks for tests and scrapers (see API.md): svg#timeline,
// rect.lane[data-pool], rect.window[data-pool][data-window][data-state],
// rect.segment[data-job][data-segment][data-window][data-state],
// text.segment-label[data-job], line#now-line, table#queue tr[data-job],
// table#metrics tr[data-metric][data-labels][data-value], #status[data-state].
#ifndef STINT_TOOLS_STINTD_SERVER_DASHBOARD_H_
#define STINT_TOOLS_STINTD_SERVER_DASHBOARD_H_

#include <string_view>

namespace stint::stintd {

// The page, UTF-8; constant for the life of the process.
std::string_view DashboardHtml();

}  // namespace stint::stintd

#endif  // STINT_TOOLS_STINTD_SERVER_DASHBOARD_H_
