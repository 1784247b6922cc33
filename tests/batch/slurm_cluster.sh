# shellcheck shell=bash
# Sourced by slurm_requeue.sh: a throw-away single-node Slurm cluster on
# localhost, everything (MUNGE key and socket, slurm.conf, state, spool,
# logs) under one scratch directory and on free ports, so that it touches
# no system configuration and can run next to another instance.
#
#   slurm_cluster_start DIR    # munged, slurmctld, slurmd; exports SLURM_CONF
#   slurm_cluster_stop         # cancels every job, stops the daemons (idempotent)

slurm_cluster_start() {
  _sc=$1
  mkdir -p "$_sc"/{munge,state,spool,log}
  chmod 700 "$_sc/munge"
  head -c 1024 /dev/urandom >"$_sc/munge/munge.key"
  chmod 600 "$_sc/munge/munge.key"
  munged --force --socket="$_sc/munge/munge.sock" --key-file="$_sc/munge/munge.key" \
    --log-file="$_sc/log/munged.log" --pid-file="$_sc/munge/munged.pid" --seed-file="$_sc/munge/munged.seed" ||
    return 1
  local ports host
  ports=$(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
  host=$(hostname -s)
  # CPUs=4 (config_overrides: whatever the machine has) so that a 2-task job
  # fits on a 1- or 2-core machine. Requeued jobs wait cred_expire seconds
  # before they may start again (120 by default); 10 keeps the test short.
  cat >"$_sc/slurm.conf" <<CONF
ClusterName=examoetest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${ports% *}
SlurmdPort=${ports#* }
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$_sc/munge/munge.sock,cred_expire=10
StateSaveLocation=$_sc/state
SlurmdSpoolDir=$_sc/spool
SlurmctldPidFile=$_sc/slurmctld.pid
SlurmdPidFile=$_sc/slurmd.pid
SlurmctldLogFile=$_sc/log/slurmctld.log
SlurmdLogFile=$_sc/log/slurmd.log
PlugStackConfig=$_sc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_interval=2
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobRequeue=1
MinJobAge=3600
KillWait=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  : >"$_sc/plugstack.conf"
  export SLURM_CONF=$_sc/slurm.conf
  slurmctld -f "$SLURM_CONF" || return 1
  slurmd -f "$SLURM_CONF" || return 1
  local i
  for i in $(seq 60); do
    [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && return 0
    sleep 0.5
  done
  echo "the Slurm node did not come up within 30 s" >&2
  return 1
}

slurm_cluster_stop() {
  [ -n "${_sc:-}" ] || return 0
  scancel --full --signal=KILL --user=root >/dev/null 2>&1 || true
  scancel --user=root >/dev/null 2>&1 || true
  local f pid pids=()
  for f in "$_sc/slurmd.pid" "$_sc/slurmctld.pid" "$_sc/munge/munged.pid"; do
    pid=$(cat "$f" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  local i
  for i in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  _sc=""
}
