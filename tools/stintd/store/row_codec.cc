#include "stintd/store/row_codec.h"

#include <limits>

namespace stint::stintd::internal {

void RowReader::Fail(int col, const std::string& what, Code code) {
  if (code_ != Code::kOk) return;
  code_ = code;
  error_ = "column " + ColumnName(col) + ": " + what;
}

int RowReader::Next() {
  const int col = next_++;
  if (col < columns_) return col;
  if (code_ == Code::kOk) {
    code_ = Code::kInternal;
    error_ = "reads column " + std::to_string(col) + " of " + std::to_string(columns_);
  }
  return -1;
}

int64_t RowReader::Int() {
  const int col = Next();
  int64_t v = 0;
  std::string why;
  if (col >= 0 && !ReadInt(col, &v, &why)) Fail(col, why);
  return v;
}

int RowReader::Int32() {
  const int64_t v = Int();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    Fail(next_ - 1, std::to_string(v) + " does not fit an int");
    return 0;
  }
  return static_cast<int>(v);
}

int64_t RowReader::Ranged(int64_t lo, int64_t hi) {
  const int64_t v = Int();
  if (v < lo || v > hi) {
    Fail(next_ - 1,
         std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return lo;
  }
  return v;
}

bool RowReader::Bool() { return Ranged(0, 1) != 0; }

double RowReader::Double() {
  const int col = Next();
  double v = 0;
  std::string why;
  if (col >= 0 && !ReadReal(col, &v, &why)) Fail(col, why);
  return v;
}

std::string RowReader::Bytes(Kind kind) {
  const int col = Next();
  std::string v, why;
  if (col >= 0 && !ReadBytes(col, kind, &v, &why)) {
    Fail(col, why);
    return {};
  }
  return v;
}

std::string RowReader::Text() { return Bytes(Kind::kText); }
std::string RowReader::Blob() { return Bytes(Kind::kBlob); }

Status RowReader::Finish(std::string_view context) {
  if (code_ != Code::kOk) return Status(code_, std::string(context) + ": " + error_);
  if (next_ != columns_) {
    return Status::Internal(std::string(context) + ": read " + std::to_string(next_) + " of " +
                            std::to_string(columns_) + " columns");
  }
  return Status::OK();
}

}  // namespace stint::stintd::internal
