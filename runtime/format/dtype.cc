#include <string>

#include "stint/state.h"

namespace stint {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kFloat32, "float32", 4},     {DType::kFloat64, "float64", 8},
    {DType::kFloat16, "float16", 2},     {DType::kBFloat16, "bfloat16", 2},
    {DType::kInt8, "int8", 1},           {DType::kUInt8, "uint8", 1},
    {DType::kInt16, "int16", 2},         {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},         {DType::kBool, "bool", 1},
    {DType::kComplex64, "complex64", 8}, {DType::kComplex128, "complex128", 16},
};

}  // namespace

size_t DTypeSize(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "unknown";
}

Result<DType> ParseDType(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) + "'");
}

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace stint
