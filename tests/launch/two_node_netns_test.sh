#!/usr/bin/env bash
# Two nodes on one machine: two network namespaces joined by a veth pair. Runs `kiln train` as
# two nodes of two workers (hybrid_shard and full_shard), checks the workers talk over the veth
# pair (never loopback), that the losses match a single-node run of the same global batch, and
# that cutting the link mid-run fails the job cleanly with an error, never a hang.
# Needs root (ip netns); exits 77 (skipped) with the reason otherwise.
# Usage: two_node_netns_test.sh KILN_BINARY SOURCE_DIR
set -uo pipefail
kiln=$1
src=$2
pass=0
fail=0
check() {  # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); echo "ok: $name"; else fail=$((fail + 1)); echo "FAIL: $name"; fi
}

tag=$$
n0=kiln0_$tag
n1=kiln1_$tag
if ! ip netns add "$n0" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root and iproute2); two-node test not run"
  exit 77
fi
work=$(mktemp -d /tmp/kiln_netns.XXXXXX)
cleanup() {
  ip netns pids "$n0" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$n1" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$n0" 2>/dev/null
  ip netns del "$n1" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$n1"
v0=kv0_$tag
v1=kv1_$tag
ip link add "$v0" type veth peer name "$v1"
ip link set "$v0" netns "$n0"
ip link set "$v1" netns "$n1"
ip -n "$n0" addr add 10.231.0.1/24 dev "$v0"
ip -n "$n1" addr add 10.231.0.2/24 dev "$v1"
for ns in "$n0" "$n1"; do ip -n "$ns" link set lo up; done
ip -n "$n0" link set "$v0" up
ip -n "$n1" link set "$v1" up

"$kiln" init --config tiny --seed 4 --out "$work/init" >/dev/null 2>&1
cat > "$work/recipe.yaml" <<YAML
model: {path: $work/init}
data: {train: $src/assets/demo/tokens.jsonl, seq_len: 64}
optimizer: {lr: 3.0e-3}
train: {max_steps: 12, micro_batch_size: 1, log_every: 12}
dist: {timeout_s: 10, threads_per_worker: 1}
output: {dir: unused}
YAML

# The store listens beyond loopback: every node needs the operator's secret (docs/security.md).
export KILN_STORE_TOKEN="netns-test-$tag-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
env -u KILN_STORE_TOKEN ip netns exec "$n0" "$kiln" train "$work/recipe.yaml" output.dir="$work/notoken" \
  --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 10.231.0.1 --master-port 29556 >"$work/notoken.log" 2>&1
check "no KILN_STORE_TOKEN: node 0 refuses to start the store (rc=$?)" grep -q "kiln: error: KILN_STORE_TOKEN is not set" "$work/notoken.log"

losses() { python3 -c "import json,sys; print(' '.join(repr(json.loads(l)['loss']) for l in open(sys.argv[1])))" "$1"; }
same_losses() {  # same_losses A B: equal within 1e-5 relative
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
ok = len(a) == len(b) == 12 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))
print("single:", a[:3], "... two-node:", b[:3], "...")
sys.exit(0 if ok else 1)
PY
}

"$kiln" train "$work/recipe.yaml" dist.nproc_per_node=4 output.dir="$work/single" >"$work/single.log" 2>&1
check "single-node reference run" test -f "$work/single/metrics.jsonl"

two_nodes() {  # two_nodes STRATEGY OUTDIR [extra overrides...]
  local strategy=$1 out=$2
  shift 2
  ip netns exec "$n0" "$kiln" train "$work/recipe.yaml" dist.strategy="$strategy" \
    output.dir="$out" "$@" --nnodes 2 --node-rank 0 --nproc-per-node 2 \
    --master-addr 10.231.0.1 --master-port 29555 >"$out.n0.log" 2>&1 &
  local p0=$!
  ip netns exec "$n1" "$kiln" train "$work/recipe.yaml" dist.strategy="$strategy" \
    output.dir="$out" "$@" --nnodes 2 --node-rank 1 --nproc-per-node 2 \
    --master-addr 10.231.0.1 --master-port 29555 >"$out.n1.log" 2>&1 &
  local p1=$!
  wait "$p0"
  local r0=$?
  wait "$p1"
  local r1=$?
  return $((r0 || r1))
}

for strategy in ${KILN_NETNS_STRATEGIES:-hybrid_shard full_shard}; do
  out="$work/$strategy"
  KILN_LOG_LEVEL=debug two_nodes "$strategy" "$out"
  check "$strategy: both nodes exit 0" test $? -eq 0
  # dist.authenticate_pairs auto: the group spans hosts, so its pairs authenticate.
  check "$strategy: workers use the veth pair, authenticated" grep -q "gloo-tcp+auth kv._$tag 10.231.0." "$out.n0.log" "$out.n1.log"
  check "$strategy: never loopback" bash -c "! grep -Eq 'gloo-tcp(\+auth)? lo ' '$out.n0.log' '$out.n1.log'"
  check "$strategy: losses match the single-node run" same_losses "$work/single/metrics.jsonl" "$out/metrics.jsonl"
done

# Gloo's own tcp transport (dist.authenticate_pairs=off): the same losses, bit for bit.
identical_losses() { python3 -c "import sys; a, b = (open(f).read().split('\n') for f in sys.argv[1:]); import json; sys.exit(0 if [json.loads(l)['loss'] for l in a if l] == [json.loads(l)['loss'] for l in b if l] else 1)" "$1" "$2"; }
strategy=${KILN_NETNS_STRATEGIES:-hybrid_shard full_shard}
strategy=${strategy%% *}
out="$work/plain_$strategy"
two_nodes "$strategy" "$out" dist.authenticate_pairs=off
check "authenticate_pairs=off: both nodes exit 0" test $? -eq 0
check "authenticate_pairs=off: Gloo's tcp transport" grep -q "gloo-tcp kv._$tag 10.231.0." "$out.n0.log" "$out.n1.log"
check "authenticate_pairs=off: losses identical to the authenticated run" identical_losses "$work/$strategy/metrics.jsonl" "$out/metrics.jsonl"

# Cut the link in the middle of a long run: both nodes must fail with a clear error.
out="$work/cut"
start=$(date +%s)
two_nodes full_shard "$out" train.max_steps=100000 &
job=$!
sleep 4
ip -n "$n1" link set "$v1" down
wait "$job"
rc=$?
elapsed=$(( $(date +%s) - start ))
check "link cut: the job fails (rc=$rc)" test "$rc" -ne 0
check "link cut: fails within the timeout ($elapsed s)" test "$elapsed" -lt 60
check "link cut: node 0 names the failure" grep -q "kiln: error:" "$out.n0.log"
tail -3 "$out.n0.log"

echo "$pass passed, $fail failed"
test "$fail" -eq 0
