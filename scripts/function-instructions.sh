#!/usr/bin/env bash
# Instructions per warm invocation of functions as deployed (issue 41.3), counted by callgrind:
# a figure machine noise can't move, beside `function_cpu`'s CPU milliseconds, which move with
# the machine by 10-20 % from one hour to the next. Runs the `function_cpu` bench (the deployed
# shape over LocalStack and RabbitMQ, one official-client worker, life cycles one at a time)
# twice, with SHORT and LONG life cycles, the instances of the functions named in HANDLERS under
# callgrind, and prints (instructions(LONG) - instructions(SHORT)) / (LONG - SHORT) for each:
# init and the warm-up cancel out. The publisher's figure is per event (four a life cycle).
#   bash localstack/localstack.sh start
#   cargo build --release -p functions --bin lambda
#   bash scripts/function-instructions.sh                 # SHORT=50 LONG=250
#   LAMBDA_BIN=/path/to/lambda HANDLERS="claimWork" bash scripts/function-instructions.sh
# Valgrind hides the CPU's SHA extensions and counts each `rep stos` step as an instruction, so
# hashing and large memsets weigh more here than in CPU time.
set -euo pipefail
cd "$(dirname "$0")/.."
SHORT=${SHORT:-50}
LONG=${LONG:-250}
HANDLERS=${HANDLERS:-"createTask claimWork reportCompleted publisher"}
LAMBDA_BIN=$(realpath "${LAMBDA_BIN:-target/release/lambda}")
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
[ -x "$LAMBDA_BIN" ] || { echo "no $LAMBDA_BIN: cargo build --release -p functions --bin lambda" >&2; exit 1; }
export AWS_ENDPOINT_URL=${AWS_ENDPOINT_URL:-http://127.0.0.1:4566} AWS_REGION=${AWS_REGION:-us-east-1}
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
bench=$(bash scripts/bench-binary.sh function_cpu --profile dev)
[ -x "$bench" ] || { echo "no function_cpu bench binary" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The shape starts every instance through this wrapper. An instance of a counted function runs
# under callgrind as the wrapper's child: the shape kills the wrapper when it stops, and the
# child writes its profile when its Runtime API is gone and it exits.
cat > "$out/wrap.sh" <<EOF
#!/usr/bin/env bash
case " $HANDLERS " in
  *" \$_HANDLER "*)
    valgrind --tool=callgrind --callgrind-out-file="\$CG_OUT.\$_HANDLER.%p" "$LAMBDA_BIN" "\$@" >/dev/null 2>&1 &
    wait ;;
  *) exec "$LAMBDA_BIN" "\$@" ;;
esac
EOF
chmod +x "$out/wrap.sh"
run() {
  CG_OUT="$out/cg.$1" BENCH_LIFECYCLES=$1 BENCH_LAMBDA_BIN="$out/wrap.sh" "$bench" --bench \
    >"$out/log.$1" 2>&1 || { cat "$out/log.$1" >&2; exit 1; }
  # Each counted instance exits once its Runtime API is gone; wait for its profile.
  for _ in $(seq 1 120); do
    pgrep -f "callgrind-out-file=$out/cg.$1" >/dev/null || return 0
    sleep 1
  done
  echo "a counted instance did not exit" >&2
  exit 1
}
run "$SHORT"
run "$LONG"
echo "commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), binary $LAMBDA_BIN"
for h in $HANDLERS; do
  total() {
    local files=("$out"/cg."$1"."$h".*)
    [ -e "${files[0]}" ] || { echo "none"; return; }
    # More than one instance means a second init in one run only: say so rather than count it.
    [ "${#files[@]}" -eq 1 ] || { echo "instances:${#files[@]}"; return; }
    awk '/^(summary|totals):/ {print $2; exit}' "${files[0]}"
  }
  a=$(total "$SHORT")
  b=$(total "$LONG")
  python3 - "$h" "$a" "$b" "$SHORT" "$LONG" <<'EOF'
import sys
h, a, b, short, long_ = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if not (a.isdigit() and b.isdigit()):
    print(f"{h}: not counted ({a}, {b})")
    sys.exit(0)
n = (long_ - short) * (4 if h == "publisher" else 1)
unit = "event" if h == "publisher" else "invocation"
print(f"{h}: {(int(b) - int(a)) / n:,.0f} instructions per {unit} ({short}: {int(a):,}; {long_}: {int(b):,})")
EOF
done
