#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input in `shared` (fuzz/fuzz_targets; RELIABILITY.md
# "Fuzzing" says what each target checks) with cargo-fuzz and libFuzzer.
# Usage: bash scripts/fuzz.sh [seconds-per-target] [target...]   (default 60 s, every target)
#        bash scripts/fuzz.sh --seeds [target...]   (regression: each committed seed once)
# Prints per target the executions, the corpus size and the crashes (and keeps each crashing
# input in fuzz/artifacts/<target>/), then `fuzz: N passed, N failed`; exits 1 on any crash.
# Works on stable Rust: cargo-fuzz's coverage flags are stable, only its sanitizers are not,
# so targets build with `--sanitizer none`; overflow checks and debug assertions are on.
# FUZZ_SANITIZER=address builds with AddressSanitizer through `cargo +nightly` instead.
# FUZZ_PROFILE=dev builds unoptimised: the build takes 109 s instead of 255 s here, the targets
# run about 7 times fewer inputs a second (router: 2,699 against 19,704); the test command's
# 10 s per target uses it, longer runs should not.
# New corpus entries go to fuzz/corpus/<target> (not committed; the seeds in
# fuzz/seeds/<target> are read, never written).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=run
secs=60
if [ "${1:-}" = "--seeds" ]; then
  mode=seeds
  shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  secs=$1
  shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=()
  for f in fuzz/fuzz_targets/*.rs; do
    targets+=("$(basename "$f" .rs)")
  done
fi

t0=$SECONDS
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version '^0.13'
fi
t1=$SECONDS

sanitizer="${FUZZ_SANITIZER:-none}"
toolchain=()
if [ "$sanitizer" != none ]; then
  toolchain=(+nightly)
fi
# One target builds alone; several build all at once (one cargo run shares the work).
one=()
if [ ${#targets[@]} -eq 1 ]; then
  one=("${targets[0]}")
fi
profile=(); bin_dir=fuzz/target/x86_64-unknown-linux-gnu/release
if [ "${FUZZ_PROFILE:-release}" = dev ]; then
  profile=(--dev); bin_dir=fuzz/target/x86_64-unknown-linux-gnu/debug
fi
cargo "${toolchain[@]}" fuzz build "${profile[@]}" --sanitizer "$sanitizer" --debug-assertions "${one[@]}"
t2=$SECONDS

# The authenticate target keeps an embedded store in a scratch directory.
scratch=fuzz/target/scratch
mkdir -p "$scratch"
export TMPDIR="$PWD/$scratch"
passed=0
failed=0
total_execs=0
printf '%-14s %12s %10s %8s %8s\n' target executions exec/s corpus crashes
for t in "${targets[@]}"; do
  seeds="fuzz/seeds/$t"
  corpus="fuzz/corpus/$t"
  artifacts="fuzz/artifacts/$t"
  mkdir -p "$seeds" "$corpus" "$artifacts"
  log="fuzz/target/fuzz-$t.log"
  before=$(find "$artifacts" -type f | wc -l)
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: one that needs 2 GB leaks.
  common=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "-artifact_prefix=$artifacts/")
  if [ "$mode" = seeds ]; then
    args=("${common[@]}" -runs=0 "$seeds")
  else
    args=("${common[@]}" "-max_total_time=$secs" "$corpus" "$seeds")
  fi
  status=0
  "$bin_dir/$t" "${args[@]}" >"$log" 2>&1 || status=$?
  crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ "$mode" = seeds ]; then
    size=$(find "$seeds" -type f | wc -l)
  else
    size=$(( $(find "$corpus" -type f | wc -l) + $(find "$seeds" -type f | wc -l) ))
  fi
  printf '%-14s %12s %10s %8s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$size" "$crashes"
  total_execs=$(( total_execs + ${execs:-0} ))
  if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    failed=$(( failed + 1 ))
    echo "--- $t failed (exit $status); the input is in $artifacts/, the log in $log:" >&2
    grep -a -m1 -A6 -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log" >&2 || tail -20 "$log" >&2
  else
    passed=$(( passed + 1 ))
  fi
done
rm -rf "$scratch"
t3=$SECONDS
echo "fuzz: install $(( t1 - t0 )) s, build $(( t2 - t1 )) s, run $(( t3 - t2 )) s; $total_execs executions"
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
