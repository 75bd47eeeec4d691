#include "stintd/server/dashboard.h"

#include "dashboard_html.h"  // generated from dashboard.html by embed_file.cmake

namespace stint::stintd {

// The page is dashboard.html, byte for byte. Everything it needs is in it: no
// external script, style, font or image, so it works on an air-gapped cluster
// and cannot leak the token to a third party. Data is only ever put into the
// DOM with textContent and setAttribute (never innerHTML): job names and
// messages are user input.
std::string_view DashboardHtml() {
  return std::string_view(reinterpret_cast<const char*>(embedded::kDashboardHtml),
                          embedded::kDashboardHtmlSize);
}

}  // namespace stint::stintd
