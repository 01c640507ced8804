#!/usr/bin/env bash
# The project's test command: everything the tests need, then every test.
# Usage: bash scripts/test.sh   (from the repo root; works on a fresh machine with rustup)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo is required (rustup)" >&2; exit 1; }

# The embedded backend needs nothing external: SQLite is compiled in (rusqlite "bundled").
# Build every target first so that compile errors and test failures are reported apart.
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads="${TEST_THREADS:-4}"
