#!/usr/bin/env bash
# Builds what the deployed shape runs: the `lambda` binary (every function of
# infra/template.yaml) and the `deployed-shape` runner. One command for every script that
# runs the shape: cargo resolves features per set of packages, so another set (`-p functions`
# alone) would build `shared` and everything above it a second time, about a minute each.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked -p functions --bin lambda --bin tc-queue -p blackbox --bin deployed-shape
