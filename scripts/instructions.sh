#!/usr/bin/env bash
# Instructions per life cycle (createTask -> claimWork -> reportCompleted), counted by
# callgrind: a figure machine noise can't move, to guard the hot path against regressions.
# Runs the in-process lifecycle bench (embedded backend, one client, no warm-up, no pickup
# phase) under callgrind twice, with SHORT and LONG life cycles, and prints
# (instructions(LONG) - instructions(SHORT)) / (LONG - SHORT): start-up cancels out.
#   bash scripts/instructions.sh            # SHORT=100 LONG=400
#   SHORT=50 LONG=200 bash scripts/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SHORT=${SHORT:-100}
LONG=${LONG:-400}
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
bin=$(bash scripts/bench-binary.sh lifecycle)
[ -x "$bin" ] || { echo "no lifecycle bench binary" >&2; exit 1; }
out=$(mktemp -d)
count() {
  BENCH_CLIENTS=1 BENCH_LIFECYCLES=$1 BENCH_WARMUP=0 BENCH_PICKUP_SAMPLES=0 \
    BENCH_SERVER_THREADS=1 BENCH_LOAD_THREADS=1 \
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" "$bin" --bench >/dev/null 2>&1
  # The totals line of the profile: total instructions (Ir) of every thread.
  awk '/^(summary|totals):/ {print $2; exit}' "$out/cg.$1"
}
a=$(count "$SHORT")
b=$(count "$LONG")
echo "commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d)"
echo "instructions: $SHORT life cycles $a, $LONG life cycles $b"
python3 -c "print('instructions per life cycle: %.0f' % (($b - $a) / ($LONG - $SHORT)))"
rm -rf "$out"
