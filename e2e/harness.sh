# Sourced by the e2e scripts: builds the harness binary (quietly, once) and runs it.
# shellcheck shell=bash
set -euo pipefail
e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$e2e_dir/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}

harness() {
  if ! command -v cargo >/dev/null; then
    echo "e2e: cargo is needed (install Rust with rustup)" >&2
    exit 1
  fi
  echo "[e2e] building the harness (cargo build -p pinfed-e2e)" >&2
  (cd "$repo" && cargo build --quiet -p pinfed-e2e) >&2
  "$target/debug/pinfed-e2e" "$@"
}
