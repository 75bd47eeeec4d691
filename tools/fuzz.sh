#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz/ and runs each for a bounded time.
#
#   tools/fuzz.sh [seconds-per-target] [out-dir]
#
# seconds: -max_total_time per target (default 20). out-dir (default
# $STINT_FUZZ_OUT, else a new temp dir) receives the binaries, corpus/<target>/
# (kept between runs, so a given out-dir accumulates coverage) and crash
# artifacts. Exit status: 0 when no target found anything (or the toolchain is
# missing: then it says so and skips), 1 when a target crashed, 2 on a build
# failure. Run from anywhere; paths are relative to the repository.
#
# The runtime sources are compiled straight into each target, instrumented,
# instead of linking libstint, so coverage reaches the code under test.
set -euo pipefail

secs="${1:-20}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${2:-${STINT_FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/stint-fuzz.XXXXXX")}}"
cxx="${FUZZ_CXX:-clang++}"
targets=(manifest_fuzz chunk_fuzz)
sources=("$repo"/runtime/format/*.cc "$repo/runtime/base/status.cc")
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined
       # UBSan only prints by default; a finding must stop the run.
       -fno-sanitize-recover=undefined
       -I "$repo/runtime" -I "$repo/runtime/include")

skip() { echo "fuzz.sh: $*; skipping the fuzzers" >&2; exit 0; }

command -v "$cxx" >/dev/null 2>&1 || skip "$cxx not found"
command -v pkg-config >/dev/null 2>&1 || skip "pkg-config not found"
pkg-config --exists libzstd libxxhash || skip "libzstd or libxxhash not found by pkg-config"
read -r -a deps <<<"$(pkg-config --cflags --libs libzstd libxxhash)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# A compiler without the libFuzzer runtime (clang_rt.fuzzer) fails here.
probe="$out/probe.cc"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$out/probe" >/dev/null 2>&1; then
  skip "$cxx cannot link -fsanitize=fuzzer (libFuzzer runtime missing)"
fi
rm -f "$probe" "$out/probe"

for t in "${targets[@]}"; do
  echo "fuzz.sh: building $t"
  if ! "$cxx" "${flags[@]}" "$repo/tests/fuzz/$t.cc" "${sources[@]}" "${deps[@]}" -o "$out/$t"; then
    echo "fuzz.sh: build of $t failed" >&2
    exit 2
  fi
done

# Manifest tokens and boundary numbers: random mutation rarely spells them.
cat >"$out/manifest_fuzz.dict" <<'DICT'
"\"manifest\""
"\"manifest_xxh3\""
"\"version\""
"\"tensors\""
"\"shards\""
"\"offsets\""
"\"extents\""
"\"chunks\""
"\"offset\""
"\"stored\""
"\"raw\""
"\"codec\""
"\"zstd\""
"\"blobs\""
"\"files\""
"\"size\""
"\"digest\""
"\"shape\""
"\"dtype\""
"\"complex128\""
"4096"
"1099511627776"
"4294967296"
"9223372036854775807"
"9223372036854775808"
"18446744073709551615"
"-1"
"1e400"
"[]"
"{}"
DICT

failed=()
for t in "${targets[@]}"; do
  corpus="$out/corpus/$t"
  mkdir -p "$corpus" "$out/artifacts"
  STINT_FUZZ_WRITE_SEEDS="$corpus" "$out/$t"
  dict=()
  [[ -f "$out/$t.dict" ]] && dict=(-dict="$out/$t.dict")
  echo "fuzz.sh: running $t for ${secs}s (corpus $corpus)"
  # -timeout: one input taking 10 s is a finding too (a hang).
  if ! "$out/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 "${dict[@]}" \
       -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" "$corpus" >"$out/$t.log" 2>&1; then
    failed+=("$t")
    echo "fuzz.sh: $t FOUND A PROBLEM; log $out/$t.log, input(s):" >&2
    ls "$out/artifacts/$t-"* >&2 2>/dev/null || true
    grep -E "ERROR|SUMMARY|runtime error|manifest_fuzz:|chunk_fuzz:" "$out/$t.log" | head -20 >&2 || true
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/$t.log" | sed "s/^/fuzz.sh: $t /" || true
  fi
done

if ((${#failed[@]})); then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: no findings (${#targets[@]} targets, ${secs}s each, output in $out)"
