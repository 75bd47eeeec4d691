// sbatch's options as a user types them to `stint slurm submit`, taken in
// every form sbatch takes (-p low, -plow, -HN2, --partition low,
// --partition=low, --part=low) and written back as #SBATCH directives that
// sbatch reads as the same argument, whatever characters the value holds.
#ifndef STINT_TOOLS_STINT_SBATCH_OPTIONS_H_
#define STINT_TOOLS_STINT_SBATCH_OPTIONS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "stint/status.h"

namespace stint {

struct SbatchOption {
  std::string flag;                  // "--partition" (the full name) or "-p"
  std::optional<std::string> value;  // what the option was given, if anything
};

// The option(s) at args[*next] (several for a cluster of short flags such as
// -HQ), with the value after it when the option takes one and it came apart
// (-p low, --partition low); advances *next past what it took. Which options
// take a value is sbatch's table (Slurm 22.05.8: `sbatch --help` shows most,
// not all); an optional value (--exclusive[=user], -k) only comes attached.
// kInvalidArgument naming the text: not an sbatch option, an ambiguous
// abbreviation, a value missing or given to a flag, a control character
// (a newline would end the #SBATCH line and start a command) in the value,
// or an option with no meaning in a batch script (--wrap, --wait, ...).
// REQUIRES: *next < args.size() and args[*next] starts with '-'.
Result<std::vector<SbatchOption>> TakeSbatchOption(const std::vector<std::string>& args,
                                                   size_t* next);

// `option` as the text after "#SBATCH ": --name=value, -p value, -kvalue or
// the bare flag, the value double-quoted when sbatch would otherwise split
// it or read part of it as a comment.
std::string SbatchDirective(const SbatchOption& option);

}  // namespace stint

#endif  // STINT_TOOLS_STINT_SBATCH_OPTIONS_H_
