// How the stintd store's row codecs (tables.h) read and write a row,
// whatever the engine: a Binder sets a statement's parameters left to
// right, a RowReader reads a result row's columns left to right. SQLite
// (sqlite_util.h) and PostgreSQL (postgres_util.h) implement them.
//
// Both keep the first error and report it from Finish(), so a row's binds
// and reads are plain lists. A column of the wrong type or out of range is
// kDataLoss naming the column: the store holds something this code never
// wrote.
#ifndef STINT_TOOLS_STINTD_STORE_ROW_CODEC_H_
#define STINT_TOOLS_STINTD_STORE_ROW_CODEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "stint/status.h"

namespace stint::stintd::internal {

class Binder {
 public:
  virtual ~Binder() = default;
  virtual void Int(int64_t v) = 0;
  // Stored as the int64 with the same bits: exact for every value, and
  // neither engine has an unsigned 64-bit type.
  void Uint(uint64_t v) { Int(static_cast<int64_t>(v)); }
  void Bool(bool v) { Int(v ? 1 : 0); }
  // A NaN is stored as NULL; RowReader::Double reads NULL back as NaN.
  virtual void Double(double v) = 0;
  // Any bytes (an embedded NUL too); copied, so the caller's buffer need not
  // outlive the bind.
  virtual void Text(std::string_view v) = 0;
  virtual void Blob(std::string_view v) = 0;
  // OK when every bind succeeded and every parameter got exactly one.
  virtual Status Finish(std::string_view context) = 0;
};

class RowReader {
 public:
  virtual ~RowReader() = default;
  int64_t Int();
  uint64_t Uint() { return static_cast<uint64_t>(Int()); }
  int Int32();
  bool Bool();
  // Integer in [lo, hi], for enums.
  int64_t Ranged(int64_t lo, int64_t hi);
  double Double();
  std::string Text();
  std::string Blob();
  // OK when every read succeeded and every column was read.
  Status Finish(std::string_view context);

 protected:
  enum class Kind { kInt, kReal, kText, kBlob };
  explicit RowReader(int columns) : columns_(columns) {}
  // Column `col`'s value read as `kind` into the matching output; false
  // with *why set when it holds another type (or NULL where none may be).
  // A kReal NULL reads as NaN.
  virtual bool ReadInt(int col, int64_t* v, std::string* why) = 0;
  virtual bool ReadReal(int col, double* v, std::string* why) = 0;
  virtual bool ReadBytes(int col, Kind kind, std::string* v, std::string* why) = 0;
  virtual std::string ColumnName(int col) const = 0;
  // Keeps the first error: `code` with "column <name>: what".
  void Fail(int col, const std::string& what, Code code = Code::kDataLoss);

 private:
  // The next column's index, or -1 (error kept) past the last one.
  int Next();
  std::string Bytes(Kind kind);

  const int columns_;
  int next_ = 0;
  std::string error_;
  Code code_ = Code::kOk;
};

}  // namespace stint::stintd::internal

#endif  // STINT_TOOLS_STINTD_STORE_ROW_CODEC_H_
