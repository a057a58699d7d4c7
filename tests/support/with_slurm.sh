#!/usr/bin/env bash
# Runs a command with a Slurm cluster of its own: munged, slurmctld and two
# slurmd daemons (nodes n1 and n2, both this machine) from Debian's packages,
# configured in a temporary directory on free loopback ports, stopped and
# removed at the end. The command finds the configuration in SLURM_CONF.
# slurmd must run as root to start jobs: as another user this exits 77
# (ctest's skip) after saying so.
set -euo pipefail

for tool in munged slurmctld slurmd sbatch; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
    echo "with_slurm: $tool is missing; apt-get install slurmctld slurmd slurm-client munge (scripts/install-deps.sh does)" >&2
    exit 1
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "with_slurm: skipped: a Slurm node of its own needs root (slurmd starts the jobs)" >&2
  exit 77
fi
PATH="$PATH:/usr/sbin"
dir="$(mktemp -d /tmp/kiln-slurm.XXXXXX)"
mkdir -p "$dir/state" "$dir/spool"
stop() {
  for pidfile in slurmd-n1 slurmd-n2 slurmctld munged; do
    [ -f "$dir/$pidfile.pid" ] && kill "$(cat "$dir/$pidfile.pid")" 2>/dev/null || true
  done
  sleep 0.5
  for pidfile in slurmd-n1 slurmd-n2 slurmctld munged; do
    [ -f "$dir/$pidfile.pid" ] && kill -9 "$(cat "$dir/$pidfile.pid")" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap stop EXIT

# The ports are free when chosen, but another process (a test beside this one
# opening thousands of connections) may take one before the daemons bind it:
# then slurmctld exits at once, and the cluster starts again on other ports.
munged --force --socket="$dir/munge.socket" --log-file="$dir/munged.log" --pid-file="$dir/munged.pid" \
  --seed-file="$dir/munged.seed" || { cat "$dir/munged.log" >&2; exit 1; }
start_cluster() {
  read -r ctld_port node_port n1_port n2_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(4)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
  node="$(hostname -s)"
  cat > "$dir/slurm.conf" <<CONF
ClusterName=kiln-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$node_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
NodeName=n1 NodeHostname=$node NodeAddr=127.0.0.1 Port=$n1_port CPUs=$(nproc) State=UNKNOWN
NodeName=n2 NodeHostname=$node NodeAddr=127.0.0.1 Port=$n2_port CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  rm -rf "$dir/state" "$dir"/spool-* && mkdir -p "$dir/state"
  slurmctld -f "$dir/slurm.conf" || return 1
  slurmd -f "$dir/slurm.conf" -N n1 || return 1
  slurmd -f "$dir/slurm.conf" -N n2 || return 1
  export SLURM_CONF="$dir/slurm.conf"
  for _ in $(seq 1 100); do
    if idle; then return 0; fi
    alive slurmctld || return 1  # it could not bind its port: no use waiting
    sleep 0.2
  done
  return 1
}
alive() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }
idle() { [ "$(timeout 5 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -eq 2 ]; }
stop_daemons() {
  for pidfile in slurmd-n1 slurmd-n2 slurmctld; do
    [ -f "$dir/$pidfile.pid" ] && kill -9 "$(cat "$dir/$pidfile.pid")" 2>/dev/null || true
    rm -f "$dir/$pidfile.pid"
  done
  sleep 0.2
}
started=0
for attempt in 1 2 3 4 5; do
  if start_cluster; then
    started=1
    break
  fi
  echo "with_slurm: the cluster did not come up (try $attempt); starting it again on other ports" >&2
  tail -3 "$dir/slurmctld.log" >&2 2>/dev/null || true
  stop_daemons
done
if [ "$started" -ne 1 ]; then
  echo "with_slurm: the nodes did not come up" >&2
  tail -20 "$dir"/*.log >&2 || true
  exit 1
fi
echo "with_slurm: Slurm $(sinfo -V | awk '{print $2}') up with nodes n1 and n2 on $node (SLURM_CONF=$SLURM_CONF)" >&2
rc=0
"$@" || rc=$?
exit $rc
