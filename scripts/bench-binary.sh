#!/usr/bin/env bash
# Builds a bench of the blackbox crate without running it and prints its executable's path.
#   bash scripts/bench-binary.sh lifecycle
#   bash scripts/bench-binary.sh function_cpu --profile dev
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
shift
cargo bench -p blackbox --bench "$name" --no-run --message-format=json "$@" 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("target",{}).get("name")==sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$name" | tail -1
