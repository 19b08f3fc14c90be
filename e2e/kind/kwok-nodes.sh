#!/usr/bin/env bash
# NOT VERIFIED HERE (no Docker engine on this project's machines).
# Installs kwok into a kind cluster and creates the fake nodes of one member of a topology
# file, so a kind member has the capacity the topology describes:
#   e2e/kind/kwok-nodes.sh clusters/local-3.yaml use1a kind-use1a
set -euo pipefail
file=$1 member=$2 context=$3
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kubectl --context "$context" apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/v0.8.0/kwok.yaml"
kubectl --context "$context" apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/v0.8.0/stage-fast.yaml"
# pinfed-e2e prints the Node objects the local harness would create for this member.
(cd "$repo" && cargo run -q -p pinfed-e2e -- nodes "$file" "$member") | kubectl --context "$context" apply -f -
