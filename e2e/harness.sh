# Sourced by the e2e scripts: builds the harness binary (quietly, once) and runs it.
# shellcheck shell=bash
set -euo pipefail
e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$e2e_dir/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}

harness() {
  # A caller that has just built the workspace (e2e/test) passes the binary, which avoids
  # a second cargo build with different feature unification.
  if [[ -n "${PINFED_E2E_HARNESS:-}" && -x "${PINFED_E2E_HARNESS}" ]]; then
    "$PINFED_E2E_HARNESS" "$@"
    return
  fi
  if ! command -v cargo >/dev/null; then
    echo "e2e: cargo is needed (install Rust with rustup)" >&2
    exit 1
  fi
  echo "[e2e] building the harness (cargo build -p pinfed-e2e)" >&2
  (cd "$repo" && cargo build --quiet -p pinfed-e2e) >&2
  "$target/debug/pinfed-e2e" "$@"
}
