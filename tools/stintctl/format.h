// stintctl's human output: times ("in 12m (2026-12-02T18:00:00Z)"),
// durations ("1h30m") and aligned tables. Pure functions of their inputs.
#ifndef STINT_TOOLS_STINTCTL_FORMAT_H_
#define STINT_TOOLS_STINTCTL_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace stint {
namespace ctl {

// "2026-12-02T18:00:00Z".
std::string FormatUtc(int64_t ms);
// The two largest non-zero units: "45s", "12m", "1m30s", "1h30m", "2d03h";
// "0s" for anything under half a second. Negative values get a "-".
std::string FormatDuration(double seconds);
// "in 12m", "3m ago", or "now" within a second.
std::string FormatRelative(int64_t ms, int64_t now_ms);
// "in 12m (2026-12-02T18:00:00Z)".
std::string FormatWhen(int64_t ms, int64_t now_ms);

// Left-aligned columns two spaces apart, the header first; the last column
// is not padded and no line has trailing blanks. A missing cell is "".
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  bool empty() const { return rows_.empty(); }
  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace ctl
}  // namespace stint

#endif  // STINT_TOOLS_STINTCTL_FORMAT_H_
