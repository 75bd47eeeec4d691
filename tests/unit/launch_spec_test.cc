// tools/common/launch_spec: the one reading of a job's "launch" object.
// Defaults, the refusal naming the field (the first bad one, in a fixed
// order), the job's GPUs, the stored text, and a spec written back as given.
#include "common/launch_spec.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "util/status_matchers.h"

namespace stint {
namespace tools {
namespace {

using json = nlohmann::json;

// The message of a refused spec; "" when it was read.
std::string Refusal(const json& launch) {
  const Result<LaunchSpec> spec = LaunchSpec::FromJson(launch);
  return spec.ok() ? "" : spec.status().message();
}

TEST(LaunchSpec, ACommandAloneTakesTheDefaults) {
  auto spec = LaunchSpec::FromJson(json{{"command", {"python", "train.py"}}});
  ASSERT_OK(spec);
  EXPECT_EQ(spec->command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(spec->GpusPerWorker(), 1);
  EXPECT_FALSE(spec->ThroughTorchrun());
  EXPECT_TRUE(spec->RestartCrashed());
  EXPECT_EQ(spec->SignalNumber(), SIGTERM);
  EXPECT_FALSE(spec->env.has_value());
  EXPECT_FALSE(spec->workdir.has_value());
}

TEST(LaunchSpec, ReadsEveryField) {
  auto spec = LaunchSpec::FromJson(json::parse(R"({
      "command": ["train"], "env": {"A": "1", "B": ""}, "workdir": "/w",
      "gpus_per_worker": 2, "signal": "USR1", "torchrun": ["torchrun", "--x"],
      "restart_crashed": false})"));
  ASSERT_OK(spec);
  EXPECT_EQ(*spec->env, (std::map<std::string, std::string>{{"A", "1"}, {"B", ""}}));
  EXPECT_EQ(*spec->workdir, "/w");
  EXPECT_EQ(spec->GpusPerWorker(), 2);
  EXPECT_EQ(spec->SignalNumber(), SIGUSR1);
  EXPECT_TRUE(spec->ThroughTorchrun());
  EXPECT_EQ(*spec->torchrun, (std::vector<std::string>{"torchrun", "--x"}));
  EXPECT_FALSE(spec->RestartCrashed());
}

TEST(LaunchSpec, SignalsByName) {
  const std::pair<const char*, int> kSignals[] = {
      {"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};
  for (const auto& [name, number] : kSignals) {
    auto spec = LaunchSpec::FromJson(json{{"command", {"x"}}, {"signal", name}});
    ASSERT_OK(spec) << name;
    EXPECT_EQ(spec->SignalNumber(), number) << name;
  }
}

TEST(LaunchSpec, RefusesNamingTheField) {
  const json ok = {{"command", {"x"}}};
  auto with = [&](const char* key, const json& value) {
    json l = ok;
    l[key] = value;
    return l;
  };
  EXPECT_EQ(Refusal(json::array()), "launch must be a JSON object");
  EXPECT_EQ(Refusal(with("cmd", "x")), "launch: unknown field \"cmd\"");
  EXPECT_EQ(Refusal(json::object()), "launch.command must be a non-empty array of strings");
  EXPECT_EQ(Refusal(with("command", json::array())),
            "launch.command must be a non-empty array of strings");
  EXPECT_EQ(Refusal(with("command", {"x", 1})), "launch.command must hold strings only");
  EXPECT_EQ(Refusal(with("torchrun", json::array())),
            "launch.torchrun must be a non-empty array of strings (the launcher, e.g. "
            "[\"torchrun\"])");
  EXPECT_EQ(Refusal(with("env", "A=1")), "launch.env must be an object of strings");
  EXPECT_EQ(Refusal(with("env", {{"A", 1}})), "launch.env: \"A\" must name a string value");
  EXPECT_EQ(Refusal(with("env", {{"A=B", "1"}})), "launch.env: \"A=B\" must name a string value");
  EXPECT_EQ(Refusal(with("workdir", 3)), "launch.workdir must be a string");
  EXPECT_EQ(Refusal(with("gpus_per_worker", 0)),
            "launch.gpus_per_worker must be an integer in [1, 1024]");
  EXPECT_EQ(Refusal(with("gpus_per_worker", 1.5)),
            "launch.gpus_per_worker must be an integer in [1, 1024]");
  EXPECT_EQ(Refusal(with("restart_crashed", "no")), "launch.restart_crashed must be true or false");
  EXPECT_EQ(Refusal(with("signal", "KILL")), "launch.signal must be TERM, INT, HUP, USR1 or USR2");
  // A null torchrun is none.
  auto null_torchrun = LaunchSpec::FromJson(with("torchrun", nullptr));
  ASSERT_OK(null_torchrun);
  EXPECT_FALSE(null_torchrun->ThroughTorchrun());
}

TEST(LaunchSpec, TheJobsGpusMustBeWholeWorkers) {
  const json l = {{"command", {"x"}}, {"gpus_per_worker", 2}};
  EXPECT_OK(LaunchSpec::ForJob(l, 2, 8));
  auto odd = LaunchSpec::ForJob(l, 2, 7);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().message(), "launch.gpus_per_worker must divide min_gpus and max_gpus");
  // Checked after gpus_per_worker itself and before the fields that follow
  // it, so a spec wrong in both is refused for the same field as always.
  json both = l;
  both["signal"] = "KILL";
  EXPECT_EQ(LaunchSpec::ForJob(both, 3, 3).status().message(),
            "launch.gpus_per_worker must divide min_gpus and max_gpus");
  EXPECT_OK(LaunchSpec::FromJson(json{{"command", {"x"}}, {"gpus_per_worker", 3}}));
}

TEST(LaunchSpec, ReadsTheStoredText) {
  auto spec = LaunchSpec::Parse(R"({"command":["a"],"gpus_per_worker":4})");
  ASSERT_OK(spec);
  EXPECT_EQ(spec->GpusPerWorker(), 4);
  EXPECT_FALSE(LaunchSpec::Parse("").ok());  // a job without a spec
  EXPECT_FALSE(LaunchSpec::Parse("{not json").ok());
}

TEST(LaunchSpec, WritesBackTheFieldsGiven) {
  for (const char* text :
       {R"({"command":["a","b"]})", R"({"command":["a"],"env":{},"gpus_per_worker":1})",
        R"({"command":["a"],"env":{"K":"V"},"gpus_per_worker":2,"restart_crashed":false,)"
        R"("signal":"TERM","torchrun":["torchrun"],"workdir":"/w"})"}) {
    auto spec = LaunchSpec::Parse(text);
    ASSERT_OK(spec) << text;
    EXPECT_EQ(spec->ToJson().dump(), text);
  }
}

}  // namespace
}  // namespace tools
}  // namespace stint
