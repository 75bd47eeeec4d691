// runtime/base/json_fields: typed reads that never throw, null and float
// policies, paths in errors, and a caller's own wording.
#include "base/json_fields.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace stint {
namespace internal {
namespace {

using json = nlohmann::json;
using Floats = JsonFieldPolicy::Floats;
using Problem = JsonFieldError::Problem;

// The message of a refused read; "" when it was not refused.
template <typename T>
std::string Refusal(const Result<T>& r) {
  return r.ok() ? "" : r.status().message();
}

TEST(JsonFields, ReadsEachKind) {
  const json j = json::parse(R"({"s":"x","b":true,"i":-3,"u":7,"n":1.5,"a":[1],"o":{}})");
  const JsonFields f(j, "");
  EXPECT_EQ(*f.String("s"), "x");
  EXPECT_EQ(*f.Bool("b"), true);
  EXPECT_EQ(*f.Int64("i"), -3);
  EXPECT_EQ(*f.Uint64("u"), 7u);
  EXPECT_EQ(*f.Number("n"), 1.5);
  EXPECT_EQ(*f.Number("u"), 7.0);
  EXPECT_EQ(*f.NonNegativeNumber("n"), 1.5);
  EXPECT_EQ((*f.Array("a"))->size(), 1u);
  EXPECT_TRUE((*f.Object("o"))->is_object());
  EXPECT_EQ(**f.OptionalString("s"), "x");
  EXPECT_FALSE(f.OptionalString("none")->has_value());
  EXPECT_EQ(*f.OptionalArray("none"), nullptr);
}

TEST(JsonFields, DefaultWordingNamesThePathAndTheExpectedKind) {
  const json j = json::parse(R"({"name":7,"gpus":"two","step":-1,"sub":{"x":null},"gang":1})");
  const JsonFields f(j, "");
  EXPECT_EQ(f.String("name").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Refusal(f.String("name")), "name must be a string");
  EXPECT_EQ(Refusal(f.Int64("gpus")), "gpus must be an integer");
  EXPECT_EQ(Refusal(f.Uint64("step")), "step must be a non-negative integer");
  EXPECT_EQ(Refusal(f.OptionalBool("gang")), "gang must be true or false");
  EXPECT_EQ(Refusal(f.String("missing")), "missing is required");
  const JsonFields sub = f.Child(**f.Object("sub"), "sub");
  EXPECT_EQ(Refusal(sub.Int64("x")), "sub.x is required");  // null is absent by default
  const json array = json::array();
  EXPECT_EQ(JsonFields(array, "request body").CheckObject().message(),
            "request body must be a JSON object");
  EXPECT_EQ(sub.BadValue("x", "is out of range").message(), "sub.x is out of range");
}

TEST(JsonFields, NullIsAValueWhenThePolicySaysSo) {
  const json j = json::parse(R"({"v":null})");
  JsonFieldPolicy strict;
  strict.null_is_absent = false;
  EXPECT_EQ(Refusal(JsonFields(j, "m", strict).OptionalInt64("v")), "m.v must be an integer");
  EXPECT_FALSE(JsonFields(j, "m").OptionalInt64("v")->has_value());
  EXPECT_EQ(JsonFields(j, "m", strict).Find("v")->type_name(), std::string("null"));
  EXPECT_EQ(JsonFields(j, "m").Find("v"), nullptr);
}

TEST(JsonFields, FloatsAsIntegersFollowThePolicy) {
  const json j = json::parse(R"({"whole":3.0,"half":2.5,"big":1e300})");
  JsonFieldPolicy p;
  p.floats_as_int64 = Floats::kRefuse;
  EXPECT_FALSE(JsonFields(j, "", p).Int64("whole").ok());
  p.floats_as_int64 = Floats::kIfIntegral;
  EXPECT_EQ(*JsonFields(j, "", p).Int64("whole"), 3);
  EXPECT_FALSE(JsonFields(j, "", p).Int64("half").ok());
  EXPECT_FALSE(JsonFields(j, "", p).Int64("big").ok());
  p.floats_as_int64 = Floats::kRound;
  EXPECT_EQ(*JsonFields(j, "", p).Int64("half"), 3);
  // An unsigned field never takes a float.
  EXPECT_FALSE(JsonFields(j, "", p).Uint64("whole").ok());
}

TEST(JsonFields, NonNegativeNumberRefusesNegatives) {
  const json j = json::parse(R"({"neg":-0.5,"zero":0})");
  const JsonFields f(j, "");
  EXPECT_EQ(Refusal(f.NonNegativeNumber("neg")), "neg must be a non-negative number");
  EXPECT_EQ(*f.NonNegativeNumber("zero"), 0.0);
}

// A caller words its own errors from the structured JsonFieldError.
Status Worded(const JsonFieldError& e) {
  return Status::DataLoss(e.path() + " [" + std::to_string(static_cast<int>(e.problem)) + " " +
                          JsonKindPhrase(e.expected) + " / " + e.actual + "]");
}

TEST(JsonFields, ACallersWordingGetsEveryPartOfTheError) {
  const json j = json::parse(R"({"files":[{"size":"big"}],"dims":[1,-2]})");
  JsonFieldPolicy p;
  p.error = Worded;
  const JsonFields top(j, "origin: manifest", p);
  const JsonFields file = top.Child((**top.Array("files"))[0], "files[0]");
  const Status wrong = file.Uint64("size").status();
  EXPECT_EQ(wrong.code(), Code::kDataLoss);
  EXPECT_EQ(wrong.message(), "origin: manifest.files[0].size [2 a non-negative integer / string]");
  EXPECT_EQ(file.String("name").status().message(),
            "origin: manifest.files[0].name [1 a string / ]");
  const json& bad = (**top.Array("dims"))[1];
  EXPECT_EQ(top.Refuse(Problem::kBadElement, "dims", JsonKind::kUint64, &bad).message(),
            "origin: manifest.dims [3 a non-negative integer / number]");
  const json one(1);
  EXPECT_EQ(JsonFields(one, "x", p).Int64("k").status().message(), "x [0 a JSON object / number]");
}

TEST(JsonFields, NothingThrowsOnHostileShapes) {
  for (const char* text : {"null", "[]", "42", "\"s\"", R"({"k":[1,{"a":null}]})"}) {
    const json j = json::parse(text);
    const JsonFields f(j, "v");
    EXPECT_FALSE(f.String("k").ok()) << text;
    EXPECT_FALSE(f.Object("k").ok()) << text;
    EXPECT_EQ(f.Find("missing"), nullptr) << text;
    EXPECT_EQ(ValueOr(f.OptionalString("k"), std::string("-")), "-") << text;
  }
}

}  // namespace
}  // namespace internal
}  // namespace stint
