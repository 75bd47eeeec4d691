#include "sbatch_options.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace stint {
namespace {

enum Arg { kNone, kRequired, kOptional };

struct LongOption {
  const char* name;
  Arg arg;
};

// sbatch's long options and whether each takes a value, as the getopt table
// of Slurm 22.05.8's sbatch has them (read off the binary: an abbreviation
// lists its candidates, `--name` and `--name=x` say which take a value).
// Sorted by name.
constexpr LongOption kLongOptions[] = {
    {"account", kRequired},
    {"acctg-freq", kRequired},
    {"array", kRequired},
    {"batch", kRequired},
    {"bb", kRequired},
    {"bbf", kRequired},
    {"begin", kRequired},
    {"chdir", kRequired},
    {"cluster", kRequired},
    {"cluster-constraint", kRequired},
    {"clusters", kRequired},
    {"comment", kRequired},
    {"constraint", kRequired},
    {"container", kRequired},
    {"context", kRequired},
    {"contiguous", kNone},
    {"core-spec", kRequired},
    {"cores-per-socket", kRequired},
    {"cpu-freq", kRequired},
    {"cpus-per-gpu", kRequired},
    {"cpus-per-task", kRequired},
    {"deadline", kRequired},
    {"delay-boot", kRequired},
    {"dependency", kRequired},
    {"distribution", kRequired},
    {"error", kRequired},
    {"exclude", kRequired},
    {"exclusive", kOptional},
    {"export", kRequired},
    {"export-file", kRequired},
    {"extra-node-info", kRequired},
    {"get-user-env", kOptional},
    {"gid", kRequired},
    {"gpu-bind", kRequired},
    {"gpu-freq", kRequired},
    {"gpus", kRequired},
    {"gpus-per-node", kRequired},
    {"gpus-per-socket", kRequired},
    {"gpus-per-task", kRequired},
    {"gres", kRequired},
    {"gres-flags", kRequired},
    {"help", kNone},
    {"hint", kRequired},
    {"hold", kNone},
    {"ignore-pbs", kNone},
    {"input", kRequired},
    {"job-name", kRequired},
    {"kill-on-invalid-dep", kRequired},
    {"licenses", kRequired},
    {"mail-type", kRequired},
    {"mail-user", kRequired},
    {"mcs-label", kRequired},
    {"mem", kRequired},
    {"mem-bind", kRequired},
    {"mem-per-cpu", kRequired},
    {"mem-per-gpu", kRequired},
    {"mincpus", kRequired},
    {"network", kRequired},
    {"nice", kOptional},
    {"no-kill", kOptional},
    {"no-requeue", kNone},
    {"nodefile", kRequired},
    {"nodelist", kRequired},
    {"nodes", kRequired},
    {"ntasks", kRequired},
    {"ntasks-per-core", kRequired},
    {"ntasks-per-gpu", kRequired},
    {"ntasks-per-node", kRequired},
    {"ntasks-per-socket", kRequired},
    {"ntasks-per-tres", kRequired},
    {"open-mode", kRequired},
    {"output", kRequired},
    {"overcommit", kNone},
    {"oversubscribe", kNone},
    {"parsable", kNone},
    {"partition", kRequired},
    {"power", kRequired},
    {"prefer", kRequired},
    {"priority", kRequired},
    {"profile", kRequired},
    {"propagate", kOptional},
    {"qos", kRequired},
    {"quiet", kNone},
    {"reboot", kNone},
    {"requeue", kNone},
    {"reservation", kRequired},
    {"signal", kRequired},
    {"sockets-per-node", kRequired},
    {"spread-job", kNone},
    {"switches", kRequired},
    {"tasks-per-node", kRequired},
    {"test-only", kNone},
    {"thread-spec", kRequired},
    {"threads-per-core", kRequired},
    {"time", kRequired},
    {"time-min", kRequired},
    {"tmp", kRequired},
    {"uid", kRequired},
    {"usage", kNone},
    {"use-min-nodes", kNone},
    {"verbose", kNone},
    {"version", kNone},
    {"wait", kNone},
    {"wait-all-nodes", kRequired},
    {"wckey", kRequired},
    {"wrap", kRequired},
};

// Its short options (getopt's optstring): with a value, flags, and -k whose
// value is optional.
constexpr char kShortWithValue[] = "abcdeimnopqtwxABCDFGJLMNS";
constexpr char kShortFlags[] = "hsvHOQVW";
constexpr char kShortOptional[] = "k";

// Options that make no sense in a job's batch script: the script is the job
// (--wrap), and `submit` runs sbatch to submit it, not to wait or only test.
constexpr const char* kNotInAScript[] = {"help", "usage", "version", "wrap", "wait", "test-only"};
constexpr char kShortNotInAScript[] = "hVW";

bool IsControl(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

std::string Hex(char c) {
  char code[8];
  std::snprintf(code, sizeof(code), "0x%02x", static_cast<unsigned char>(c));
  return code;
}

// The error for the argument `text`, its control characters shown as codes.
Status Bad(const std::string& text, const std::string& why) {
  std::string shown;
  for (char c : text) shown += IsControl(c) ? "<" + Hex(c) + ">" : std::string(1, c);
  return Status::InvalidArgument("sbatch option '" + shown + "': " + why);
}

// OK when `value` holds no control character: a #SBATCH directive is one
// line, and a newline in it would start a command of the script.
Status CheckValue(const SbatchOption& option) {
  for (char c : *option.value) {
    if (IsControl(c)) {
      return Bad(option.flag, "its value holds a control character (" + Hex(c) +
                                  "); a batch script's #SBATCH line cannot");
    }
  }
  return Status::OK();
}

// The long option `name` names: itself, or the one option it abbreviates.
Result<const LongOption*> FindLong(const std::string& text, const std::string& name) {
  std::vector<const LongOption*> matches;
  for (const LongOption& o : kLongOptions) {
    if (name == o.name) return &o;
    if (!name.empty() && std::strncmp(o.name, name.c_str(), name.size()) == 0)
      matches.push_back(&o);
  }
  if (matches.empty()) return Bad(text, "sbatch has no such option");
  if (matches.size() > 1) {
    std::string which;
    for (const LongOption* o : matches)
      which += std::string(which.empty() ? "" : ", ") + "--" + o->name;
    return Bad(text, "ambiguous: " + which);
  }
  return matches[0];
}

bool Refused(const std::string& long_name) {
  return std::find(std::begin(kNotInAScript), std::end(kNotInAScript), long_name) !=
         std::end(kNotInAScript);
}

}  // namespace

Result<std::vector<SbatchOption>> TakeSbatchOption(const std::vector<std::string>& args,
                                                   size_t* next) {
  const std::string& text = args[*next];
  ++*next;
  // The value after the option, apart; false when there is none.
  auto value_apart = [&](std::string* out) {
    if (*next >= args.size()) return false;
    *out = args[(*next)++];
    return true;
  };
  std::vector<SbatchOption> taken;
  if (text.rfind("--", 0) == 0) {
    const size_t eq = text.find('=');
    STINT_ASSIGN_OR_RETURN(const LongOption* o, FindLong(text, text.substr(2, eq - 2)));
    SbatchOption option{std::string("--") + o->name, std::nullopt};
    if (Refused(o->name)) return Bad(text, "has no place in a job's batch script");
    if (eq != std::string::npos) {
      if (o->arg == kNone) return Bad(text, option.flag + " takes no value");
      option.value = text.substr(eq + 1);
    } else if (o->arg == kRequired) {
      std::string v;
      if (!value_apart(&v)) return Bad(text, "needs a value");
      option.value = v;
    }
    taken.push_back(option);
  } else {
    for (size_t j = 1; j < text.size(); ++j) {
      const char c = text[j];
      SbatchOption option{std::string("-") + c, std::nullopt};
      if (std::strchr(kShortNotInAScript, c) != nullptr)
        return Bad(text, option.flag + " has no place in a job's batch script");
      if (std::strchr(kShortFlags, c) != nullptr) {
        taken.push_back(option);
        continue;
      }
      std::string rest = text.substr(j + 1);
      if (std::strchr(kShortWithValue, c) != nullptr) {
        if (rest.empty() && !value_apart(&rest)) return Bad(text, option.flag + " needs a value");
        option.value = rest;
      } else if (std::strchr(kShortOptional, c) != nullptr) {
        if (!rest.empty()) option.value = rest;
      } else {
        return Bad(text, "sbatch has no option " + option.flag);
      }
      taken.push_back(option);
      break;  // the rest of the word was the value
    }
    if (taken.empty()) return Bad(text, "not an option");
  }
  for (const SbatchOption& option : taken) {
    if (option.value) STINT_RETURN_IF_ERROR(CheckValue(option));
  }
  return taken;
}

std::string SbatchDirective(const SbatchOption& option) {
  if (!option.value) return option.flag;
  const std::string& v = *option.value;
  // sbatch splits a directive at blanks, reads '#' as a comment and quotes
  // and backslashes as quoting: anything but these characters is quoted.
  const bool plain =
      !v.empty() && v.find_first_not_of(
                        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789_.,:;@%+=/-[]^!*~()<>{}|&?$") == std::string::npos;
  std::string text = v;
  if (!plain) {
    text = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') text += '\\';
      text += c;
    }
    text += '"';
  }
  if (option.flag.rfind("--", 0) == 0) return option.flag + "=" + text;
  if (std::strchr(kShortOptional, option.flag[1]) != nullptr) return option.flag + text;
  return option.flag + " " + text;
}

}  // namespace stint
