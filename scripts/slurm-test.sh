#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs packaging/slurm/kvscope-array.sbatch on a real single-node Slurm that this script starts
# (Debian's slurm-wlm and munge, installed when missing; needs root or sudo), then checks that the
# array's merged ledger reports exactly what one unsharded run of the same experiment reports.
#   scripts/slurm-test.sh [kvscope-binary]      default: build/dev/app/kvscope
# The daemons run from a scratch folder with their own slurm.conf (SLURM_CONF) and are stopped at
# the end; nothing under /etc/slurm is touched. Prints each step and its time.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kvscope="$(realpath "${1:-$root/build/dev/app/kvscope}")"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
step() { echo "slurm-test: $* ($SECONDS s)"; }

missing=()
for p in slurm-wlm munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

work="$(mktemp -d /tmp/kvscope-slurm.XXXXXX)"
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do $SUDO kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# munge: the authentication every Slurm daemon and client uses. Its key is made by the package.
if ! pgrep -x munged >/dev/null; then
  [ -f /etc/munge/munge.key ] || $SUDO mungekey --create
  $SUDO mkdir -p /run/munge && $SUDO chown munge:munge /run/munge
  if [ "$(id -u)" -eq 0 ]; then runuser -u munge -- /usr/sbin/munged; else sudo -u munge /usr/sbin/munged; fi
fi
munge -n | unmunge >/dev/null || { echo "slurm-test: munge does not work" >&2; exit 1; }
step "munge is up"

node="$(hostname -s)"
cpus="$(nproc)"
memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
mkdir -p "$work/state" "$work/spool"
cat > "$work/slurm.conf" <<CONF
ClusterName=kvscope-test
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$work/slurm.conf"
$SUDO env SLURM_CONF="$SLURM_CONF" /usr/sbin/slurmctld -D -i > "$work/slurmctld.out" 2>&1 &
pids+=($!)
$SUDO env SLURM_CONF="$SLURM_CONF" /usr/sbin/slurmd -D > "$work/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qE "^idle" && break
  sleep 1
done
if ! sinfo -h -o %T 2>/dev/null | grep -qE "^idle"; then
  echo "slurm-test: the node never became idle; daemon output follows" >&2
  tail -n 20 "$work"/slurmctld.out "$work"/slurmd.out "$work"/slurmctld.log "$work"/slurmd.log >&2 2>/dev/null || true
  exit 1
fi
step "slurmctld and slurmd are up: $(sinfo -h -o '%P %D %c %T')"

# The experiment: a generated 2-layer model, six items, three protocols. Every array task generates
# the model itself (the same bytes; the first rename wins).
cp "$root/experiments/data/arith12.jsonl" "$work/items.jsonl"
cat > "$work/exp.toml" <<TOML
name = "slurm-test"
[model]
dir = "model"
dtypes = ["bf16"]
threads = 1
[model.generate]
arch = "qwen2"
seed = 11
hidden_size = 64
layers = 2
heads = 4
kv_heads = 2
intermediate_size = 128
[dataset]
path = "items.jsonl"
[generation]
max_new_tokens = 24
ignore_eos = true
[boundary]
rule = "fraction"
fraction = 0.5
[protocols]
run = ["matched", "bridge", "transplant"]
TOML

shards=3
cd "$work"
job=$(KVSCOPE="$kvscope" KVSCOPE_OUT="$work/results" sbatch --parsable --array=0-$((shards - 1)) \
        --cpus-per-task=1 --mem=1G --time=00:20:00 --output="$work/task-%a.log" \
        "$root/packaging/slurm/kvscope-array.sbatch" "$work/exp.toml")
step "submitted job array $job ($shards tasks)"
for _ in $(seq 600); do
  [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
  sleep 1
done
[ -z "$(squeue -h -o %i)" ] || { echo "slurm-test: jobs still queued after 10 minutes:" >&2; squeue >&2; exit 1; }
for log in "$work"/task-*.log; do echo "  $(basename "$log"): $(grep -h "started\|resumed" "$log" | tail -1)"; done
[ -f "$work/results/merge.log" ] && sed 's/^/  merge.log: /' "$work/results/merge.log" | grep "run "
[ -f "$work/results/all.db" ] || { echo "slurm-test: the merge job wrote no results/all.db" >&2; exit 1; }
step "array and merge job finished"

"$kvscope" run "$work/exp.toml" --ledger "$work/unsharded.db" --threads 1 2>/dev/null
# The report's time section is wall-clock seconds of two different runs; every other key must match.
report_without_time() {
  "$kvscope" report "$1" --format json |
    python3 -c 'import json, sys; r = json.load(sys.stdin); r.pop("time"); json.dump(r, sys.stdout, indent=1, sort_keys=True)'
}
report_without_time "$work/results/all.db" > "$work/sharded.json"
report_without_time "$work/unsharded.db" > "$work/unsharded.json"
if ! diff "$work/sharded.json" "$work/unsharded.json"; then
  echo "slurm-test: the merged array's report differs from the unsharded run's (above)" >&2
  exit 1
fi
step "PASS: $shards array tasks + merge give the unsharded report ($(grep -m1 -o '"items": [0-9]*' "$work/sharded.json"))"
rm -rf "$work"
