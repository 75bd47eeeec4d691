// JsonFields: typed reads of one JSON object's fields that never throw
// (nlohmann's at() and get<T>() throw on a missing field or another type, and
// JSON from a file or the network is untrusted). The manifest decoder, the
// coordinator client, stintd's request parsing and stintctl all read through
// it; each says in a JsonFieldPolicy how null and floats count and how an
// error is worded, so each keeps the codes and messages its users know.
//
// An error names the field's path and what it should have held
// ("manifest.files[0].size", "a non-negative integer").
//
// Thread-compatible; a JsonFields is a cheap view and may be copied. Only the
// forward declaration of nlohmann::json is included here; callers that look
// into the values include <nlohmann/json.hpp> themselves.
#ifndef STINT_RUNTIME_BASE_JSON_FIELDS_H_
#define STINT_RUNTIME_BASE_JSON_FIELDS_H_

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "stint/status.h"

namespace stint {
namespace internal {

// What a field must hold.
enum class JsonKind : uint8_t {
  kString,
  kBool,
  kInt64,              // an integer (a float only as JsonFieldPolicy::floats_as_int64 says)
  kUint64,             // an integer >= 0; never a float
  kNumber,             // any JSON number, as a double
  kNonNegativeNumber,  // a finite number >= 0
  kArray,
  kObject,
};

// "a string", "true or false", "an integer", "a non-negative integer",
// "a number", "a non-negative number", "an array", "a JSON object".
const char* JsonKindPhrase(JsonKind kind);

// Why a read was refused; a JsonFieldPolicy turns it into a Status.
struct JsonFieldError {
  enum class Problem : uint8_t {
    kNotObject,   // the value read is not an object (`key` is empty)
    kMissing,     // a required field is absent (or null, under null_is_absent)
    kWrongType,   // the field holds another kind of value than `expected`
    kBadElement,  // an element of the array field `key` is not `expected`
    kBadValue,    // the right kind, but a value the caller refuses; `detail` says why
  };
  Problem problem = Problem::kMissing;
  std::string object_path;  // the object read ("manifest.files[0]"), "" at the top
  std::string key;          // the field
  JsonKind expected = JsonKind::kObject;
  std::string actual;  // nlohmann's name of the type found ("number"), "" when none
  std::string detail;  // kBadValue only

  // "object_path.key", or whichever of the two is not empty.
  std::string path() const;
};

// The wording stintd's requests use, kInvalidArgument: "<path> is required",
// "<path> must be <phrase>", "<path> must be a JSON object", "<path> holds a
// value that is not <phrase>", "<path> <detail>".
Status DefaultJsonFieldError(const JsonFieldError& error);

// How one caller's reads treat null and floats and word their errors.
struct JsonFieldPolicy {
  enum class Floats : uint8_t {
    kRefuse,      // a float is not an integer
    kIfIntegral,  // 3.0 is 3 (|value| < 9e15); 3.5 is refused
    kRound,       // any finite float, rounded to the nearest integer
  };
  // A null field reads as an absent one. Default: true.
  bool null_is_absent = true;
  // A float where kInt64 is expected. Default: kRefuse.
  Floats floats_as_int64 = Floats::kRefuse;
  // Makes the Status of a refused read. Default (nullptr): DefaultJsonFieldError.
  Status (*error)(const JsonFieldError&) = nullptr;
};

class JsonFields {
 public:
  // Reads `value`, which must outlive this view and its copies. `path` names
  // it in errors ("manifest", "" for a request body's top level).
  JsonFields(const nlohmann::json& value, std::string path,
             const JsonFieldPolicy& policy = JsonFieldPolicy());

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }

  // OK when the value is an object, else the kNotObject error. Every getter
  // below refuses a non-object the same way.
  Status CheckObject() const;

  // A view of `child` (a field's object, an array's element) named
  // "<path>.<name>", with the same policy.
  JsonFields Child(const nlohmann::json& child, std::string_view name) const;

  // The field; nullptr when it is absent (null too, under null_is_absent)
  // or the value is not an object. Never an error.
  const nlohmann::json* Find(std::string_view key) const;

  // Required fields: kMissing when absent, kWrongType when of another kind.
  Result<std::string> String(std::string_view key) const;
  Result<bool> Bool(std::string_view key) const;
  Result<int64_t> Int64(std::string_view key) const;
  Result<uint64_t> Uint64(std::string_view key) const;
  Result<double> Number(std::string_view key) const;
  Result<double> NonNegativeNumber(std::string_view key) const;
  // The field itself (not null); it lives as long as value().
  Result<const nlohmann::json*> Array(std::string_view key) const;
  Result<const nlohmann::json*> Object(std::string_view key) const;

  // Optional fields: nullopt (nullptr) when absent, kWrongType when of another kind.
  Result<std::optional<std::string>> OptionalString(std::string_view key) const;
  Result<std::optional<bool>> OptionalBool(std::string_view key) const;
  Result<std::optional<int64_t>> OptionalInt64(std::string_view key) const;
  Result<std::optional<uint64_t>> OptionalUint64(std::string_view key) const;
  Result<std::optional<double>> OptionalNumber(std::string_view key) const;
  Result<std::optional<double>> OptionalNonNegativeNumber(std::string_view key) const;
  Result<const nlohmann::json*> OptionalArray(std::string_view key) const;
  Result<const nlohmann::json*> OptionalObject(std::string_view key) const;

  // The policy's Status for a problem the caller found itself: an element of
  // an array (`found` is that element), a value out of range (kBadValue,
  // `detail`).
  Status Refuse(JsonFieldError::Problem problem, std::string_view key, JsonKind expected,
                const nlohmann::json* found = nullptr, std::string_view detail = {}) const;
  Status BadValue(std::string_view key, std::string_view detail) const {
    return Refuse(JsonFieldError::Problem::kBadValue, key, JsonKind::kObject, nullptr, detail);
  }

 private:
  // The field checked against `kind`: nullptr when optional and absent.
  Result<const nlohmann::json*> Lookup(std::string_view key, JsonKind kind, bool required) const;

  const nlohmann::json* value_;
  std::string path_;
  JsonFieldPolicy policy_;
};

// The value of an optional read, or `fallback` when the field is absent or
// refused: for readers that show what they can (stintctl's tables).
template <typename T>
T ValueOr(const Result<std::optional<T>>& read, T fallback) {
  return read.ok() && read->has_value() ? **read : std::move(fallback);
}

}  // namespace internal
}  // namespace stint

#endif  // STINT_RUNTIME_BASE_JSON_FIELDS_H_
