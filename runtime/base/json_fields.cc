#include "base/json_fields.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace stint {
namespace internal {
namespace {

using json = nlohmann::json;
using Floats = JsonFieldPolicy::Floats;
using Problem = JsonFieldError::Problem;

std::optional<int64_t> AsInt64(const json& v, Floats floats) {
  // A parsed integer above INT64_MAX wraps, as every reader before this one did.
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  switch (floats) {
    case Floats::kRefuse:
      return std::nullopt;
    case Floats::kIfIntegral:
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
        return static_cast<int64_t>(d);
      return std::nullopt;
    case Floats::kRound:
      if (std::isfinite(d)) return std::llround(d);
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<uint64_t> AsUint64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  return std::nullopt;
}

bool Holds(const json& v, JsonKind kind, Floats floats) {
  switch (kind) {
    case JsonKind::kString:
      return v.is_string();
    case JsonKind::kBool:
      return v.is_boolean();
    case JsonKind::kInt64:
      return AsInt64(v, floats).has_value();
    case JsonKind::kUint64:
      return AsUint64(v).has_value();
    case JsonKind::kNumber:
      return v.is_number();
    case JsonKind::kNonNegativeNumber:
      return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0;
    case JsonKind::kArray:
      return v.is_array();
    case JsonKind::kObject:
      return v.is_object();
  }
  return false;
}

// An optional read's value from Lookup's answer.
template <typename T, typename Convert>
Result<std::optional<T>> Optional(Result<const json*> found, Convert convert) {
  if (!found.ok()) return found.status();
  if (*found == nullptr) return std::optional<T>();
  return std::optional<T>(convert(**found));
}

// A required read's value from Lookup's answer (never nullptr when OK).
template <typename T, typename Convert>
Result<T> Required(Result<const json*> found, Convert convert) {
  if (!found.ok()) return found.status();
  return convert(**found);
}

}  // namespace

const char* JsonKindPhrase(JsonKind kind) {
  switch (kind) {
    case JsonKind::kString:
      return "a string";
    case JsonKind::kBool:
      return "true or false";
    case JsonKind::kInt64:
      return "an integer";
    case JsonKind::kUint64:
      return "a non-negative integer";
    case JsonKind::kNumber:
      return "a number";
    case JsonKind::kNonNegativeNumber:
      return "a non-negative number";
    case JsonKind::kArray:
      return "an array";
    case JsonKind::kObject:
      return "a JSON object";
  }
  return "?";
}

std::string JsonFieldError::path() const {
  if (object_path.empty()) return key;
  if (key.empty()) return object_path;
  return object_path + "." + key;
}

Status DefaultJsonFieldError(const JsonFieldError& e) {
  const std::string path = e.path().empty() ? "the value" : e.path();
  switch (e.problem) {
    case Problem::kNotObject:
      return Status::InvalidArgument(path + " must be a JSON object");
    case Problem::kMissing:
      return Status::InvalidArgument(path + " is required");
    case Problem::kWrongType:
      return Status::InvalidArgument(path + " must be " + JsonKindPhrase(e.expected));
    case Problem::kBadElement:
      return Status::InvalidArgument(path + " holds a value that is not " +
                                     JsonKindPhrase(e.expected));
    case Problem::kBadValue:
      return Status::InvalidArgument(path + " " + e.detail);
  }
  return Status::InvalidArgument(path + " is refused");
}

JsonFields::JsonFields(const json& value, std::string path, const JsonFieldPolicy& policy)
    : value_(&value), path_(std::move(path)), policy_(policy) {}

Status JsonFields::CheckObject() const {
  if (value_->is_object()) return Status::OK();
  return Refuse(Problem::kNotObject, {}, JsonKind::kObject, value_);
}

JsonFields JsonFields::Child(const json& child, std::string_view name) const {
  return JsonFields(child, path_.empty() ? std::string(name) : path_ + "." + std::string(name),
                    policy_);
}

const json* JsonFields::Find(std::string_view key) const {
  if (!value_->is_object()) return nullptr;
  auto it = value_->find(std::string(key));
  if (it == value_->end() || (policy_.null_is_absent && it->is_null())) return nullptr;
  return &*it;
}

Status JsonFields::Refuse(Problem problem, std::string_view key, JsonKind expected,
                          const json* found, std::string_view detail) const {
  JsonFieldError e;
  e.problem = problem;
  e.object_path = path_;
  e.key = std::string(key);
  e.expected = expected;
  if (found != nullptr) e.actual = found->type_name();
  e.detail = std::string(detail);
  return policy_.error != nullptr ? policy_.error(e) : DefaultJsonFieldError(e);
}

Result<const json*> JsonFields::Lookup(std::string_view key, JsonKind kind, bool required) const {
  STINT_RETURN_IF_ERROR(CheckObject());
  const json* v = Find(key);
  if (v == nullptr) {
    if (required) return Refuse(Problem::kMissing, key, kind);
    return static_cast<const json*>(nullptr);
  }
  if (!Holds(*v, kind, policy_.floats_as_int64)) return Refuse(Problem::kWrongType, key, kind, v);
  return v;
}

Result<std::string> JsonFields::String(std::string_view key) const {
  return Required<std::string>(Lookup(key, JsonKind::kString, true),
                               [](const json& v) { return v.get<std::string>(); });
}

Result<bool> JsonFields::Bool(std::string_view key) const {
  return Required<bool>(Lookup(key, JsonKind::kBool, true),
                        [](const json& v) { return v.get<bool>(); });
}

Result<int64_t> JsonFields::Int64(std::string_view key) const {
  const Floats floats = policy_.floats_as_int64;
  return Required<int64_t>(Lookup(key, JsonKind::kInt64, true),
                           [floats](const json& v) { return *AsInt64(v, floats); });
}

Result<uint64_t> JsonFields::Uint64(std::string_view key) const {
  return Required<uint64_t>(Lookup(key, JsonKind::kUint64, true),
                            [](const json& v) { return *AsUint64(v); });
}

Result<double> JsonFields::Number(std::string_view key) const {
  return Required<double>(Lookup(key, JsonKind::kNumber, true),
                          [](const json& v) { return v.get<double>(); });
}

Result<double> JsonFields::NonNegativeNumber(std::string_view key) const {
  return Required<double>(Lookup(key, JsonKind::kNonNegativeNumber, true),
                          [](const json& v) { return v.get<double>(); });
}

Result<const json*> JsonFields::Array(std::string_view key) const {
  return Lookup(key, JsonKind::kArray, true);
}

Result<const json*> JsonFields::Object(std::string_view key) const {
  return Lookup(key, JsonKind::kObject, true);
}

Result<std::optional<std::string>> JsonFields::OptionalString(std::string_view key) const {
  return Optional<std::string>(Lookup(key, JsonKind::kString, false),
                               [](const json& v) { return v.get<std::string>(); });
}

Result<std::optional<bool>> JsonFields::OptionalBool(std::string_view key) const {
  return Optional<bool>(Lookup(key, JsonKind::kBool, false),
                        [](const json& v) { return v.get<bool>(); });
}

Result<std::optional<int64_t>> JsonFields::OptionalInt64(std::string_view key) const {
  const Floats floats = policy_.floats_as_int64;
  return Optional<int64_t>(Lookup(key, JsonKind::kInt64, false),
                           [floats](const json& v) { return *AsInt64(v, floats); });
}

Result<std::optional<uint64_t>> JsonFields::OptionalUint64(std::string_view key) const {
  return Optional<uint64_t>(Lookup(key, JsonKind::kUint64, false),
                            [](const json& v) { return *AsUint64(v); });
}

Result<std::optional<double>> JsonFields::OptionalNumber(std::string_view key) const {
  return Optional<double>(Lookup(key, JsonKind::kNumber, false),
                          [](const json& v) { return v.get<double>(); });
}

Result<std::optional<double>> JsonFields::OptionalNonNegativeNumber(std::string_view key) const {
  return Optional<double>(Lookup(key, JsonKind::kNonNegativeNumber, false),
                          [](const json& v) { return v.get<double>(); });
}

Result<const json*> JsonFields::OptionalArray(std::string_view key) const {
  return Lookup(key, JsonKind::kArray, false);
}

Result<const json*> JsonFields::OptionalObject(std::string_view key) const {
  return Lookup(key, JsonKind::kObject, false);
}

}  // namespace internal
}  // namespace stint
