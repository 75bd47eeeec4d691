#!/bin/bash
# A real Slurm cluster on this host, for stint's Slurm tests and demo:
# a private munged, one slurmctld and N slurmd (`slurmd -N NAME`, each node
# on its own port), fake GPUs as character devices named in gres.conf, two
# partitions ("low" preemptible with PreemptMode=REQUEUE and GraceTime,
# "high" above it), fast scheduling. Everything lives in DIR but the Unix
# sockets (a short /tmp/stint-slurm.* directory `stop` removes); the node names
# go to /etc/hosts with a tag naming DIR, so `stop` removes exactly its own.
#
#   tools/slurm/cluster.sh start DIR [--nodes N] [--gpus G] [--prefix NAME]
#                                    [--grace S] [--kill-wait S]
#   eval "$(tools/slurm/cluster.sh env DIR)"   # SLURM_CONF for sbatch/srun/squeue
#   tools/slurm/cluster.sh stop DIR
#
# `start` returns once sinfo shows every node idle (or fails, printing the
# daemons' logs). It needs root (slurmd runs jobs as their users), Debian's
# slurmctld, slurmd, slurm-client and munge (tools/setup.sh installs them).
# Slurm 22.05's facts this relies on: ../shared/research/cluster_engines_2026.md.
set -euo pipefail

usage() {
  sed -n '2,17p' "$0" >&2
  exit 2
}

die() {
  echo "slurm cluster: $*" >&2
  exit 1
}

# A TCP port nobody listens on (a random one from a range away from the
# ephemeral ports and from the campaign's and tests' ranges).
free_port() {
  local port
  for _ in $(seq 1 200); do
    port=$((30000 + RANDOM % 2000))
    if ! ss -Htln "sport = :$port" | grep -q .; then
      echo "$port"
      return
    fi
  done
  die "no free port in 30000-31999"
}

# Waits until `cmd` succeeds, at most `seconds`; the daemons' logs on failure.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      for log in "$DIR"/log/*.log; do
        echo "--- $log" >&2
        tail -20 "$log" >&2 || true
      done
      die "$what within $seconds s"
    fi
    sleep 0.2
  done
}

all_idle() {
  local states
  states=$(SLURM_CONF="$DIR/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [ "$(echo "$states" | awk '$2 == "idle"' | sort -u | wc -l)" -eq "$NODES" ]
}

# Removes the /etc/hosts lines of clusters whose directory is gone, and of
# an earlier cluster in this DIR (runs killed before their stop), in place
# (/etc/hosts may be a bind mount).
prune_hosts() {
  local kept="" line dir changed=0
  while IFS= read -r line; do
    dir=$(sed -n 's/.*# stint-slurm \(.*\)$/\1/p' <<< "$line")
    if [ -n "$dir" ] && { [ ! -d "$dir" ] || [ "$dir" = "$DIR" ]; }; then
      changed=1
      continue
    fi
    kept+="$line"$'\n'
  done < /etc/hosts
  [ "$changed" = 1 ] && printf '%s' "$kept" > /etc/hosts
  return 0
}

start() {
  [ "$(id -u)" = 0 ] || die "needs root (slurmd starts jobs as their users)"
  for tool in munged mungekey slurmctld slurmd sinfo sbatch; do
    command -v "$tool" >/dev/null || die "$tool is missing (bash tools/setup.sh installs Slurm)"
  done
  [ -e "$DIR/slurm.conf" ] && die "$DIR already holds a cluster (stop it first)"
  mkdir -p "$DIR"/{state,log,dev,run}
  DIR=$(cd "$DIR" && pwd)
  prune_hosts
  # The Unix sockets (munged's, and slurmstepd's per job step in the spool,
  # named NODE_JOBID.STEPID) live under a short directory of their own: a
  # socket path over 107 bytes makes every batch launch fail, and Slurm then
  # cancels jobs that may not be requeued (seen with a DIR 13 bytes longer).
  SOCK=$(mktemp -d /tmp/stint-slurm.XXXXXX)
  echo "$SOCK" > "$DIR/run/socket_dir"
  mkdir -p "$SOCK"/{munge,spool}
  chmod 700 "$SOCK/munge"
  local longest="$SOCK/spool/$PREFIX$NODES/$PREFIX${NODES}_4294967295.4294967295"
  [ ${#longest} -lt 108 ] || die "socket paths such as $longest are over 107 bytes: use a shorter --prefix"

  # munge: a private key and socket (the system's munged is not ours to use).
  mungekey -c -k "$SOCK/munge/munge.key" >/dev/null
  chmod 400 "$SOCK/munge/munge.key"
  munged --force --socket="$SOCK/munge/munge.socket" --key-file="$SOCK/munge/munge.key" \
    --pid-file="$SOCK/munge/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$SOCK/munge/munged.seed"
  wait_for 20 "munged did not start" test -S "$SOCK/munge/munge.socket"

  local ctld_port host nodes_conf="" gres_conf="" name
  ctld_port=$(free_port)
  host=$(hostname -s)
  for k in $(seq 1 "$NODES"); do
    name="$PREFIX$k"
    mkdir -p "$SOCK/spool/$name"
    for g in $(seq 0 $((GPUS - 1))); do
      # A character device (like /dev/null): Slurm then sets
      # CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS; a regular file gives nothing.
      mknod "$DIR/dev/$name-gpu$g" c 1 3
    done
    nodes_conf+="NodeName=$name NodeAddr=127.0.0.1 NodeHostname=$name Port=$(free_port) CPUs=$((GPUS * 2)) RealMemory=4096 Gres=gpu:$GPUS State=UNKNOWN
"
    gres_conf+="NodeName=$name Name=gpu File=$DIR/dev/$name-gpu[0-$((GPUS - 1))]
"
    echo "127.0.0.1 $name # stint-slurm $DIR" >> /etc/hosts
  done
  echo "$ctld_port" > "$DIR/run/ctld_port"
  # Job ids start at a block of 100 of their own (by the controller's port):
  # stint derives a job's default MASTER_PORT from its id, so clusters
  # running side by side on this host must not number jobs alike.
  local first_job=$(( (ctld_port % 100) * 100 + 1 ))

  cat > "$DIR/slurm.conf" <<EOF
# Written by tools/slurm/cluster.sh for $DIR.
ClusterName=stint
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK/munge/munge.socket
# Job credentials unsigned: the nodes share one munged here, whose replay
# cache refuses the same credential decoded for a second node ("Job
# credential replayed", seen under load). RPCs stay authenticated by munge.
CredType=cred/none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$SOCK/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# No slurmdbd; finished jobs go to a job-completion log, which sacct -c
# reads (stintd --slurm asks it how a job squeue forgot ended).
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
MpiDefault=none
SlurmdParameters=config_overrides
# Long RPC timeouts: on a loaded host a launch that times out is retried and
# the node refuses the retry ("Job credential replayed", the step fails).
MessageTimeout=60
# An admin's DOWN holds until RESUME (the node-down tests); a node DOWN for
# not responding returns once its slurmd registers again.
ReturnToService=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2,sched_min_interval=100000
MinJobAge=3600
FirstJobId=$first_job
KillWait=$KILL_WAIT
JobRequeue=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
$nodes_conf
PartitionName=low Nodes=ALL Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=$GRACE MaxTime=INFINITE State=UP
PartitionName=high Nodes=ALL PriorityTier=2 PreemptMode=OFF MaxTime=INFINITE State=UP
EOF
  printf '%s' "$gres_conf" > "$DIR/gres.conf"

  slurmctld -c -D -f "$DIR/slurm.conf" > "$DIR/log/slurmctld.out" 2>&1 &
  echo $! > "$DIR/run/slurmctld.daemon"
  for k in $(seq 1 "$NODES"); do
    slurmd -D -N "$PREFIX$k" -f "$DIR/slurm.conf" > "$DIR/log/slurmd-$PREFIX$k.out" 2>&1 &
    echo $! > "$DIR/run/slurmd-$PREFIX$k.daemon"
  done
  wait_for 60 "the nodes were not all idle" all_idle
  echo "slurm cluster: $NODES nodes x $GPUS GPUs idle in $DIR (SLURM_CONF=$DIR/slurm.conf)"
}

stop() {
  [ -d "$DIR" ] || die "$DIR does not exist"
  DIR=$(cd "$DIR" && pwd)
  local SOCK=""
  [ -e "$DIR/run/socket_dir" ] && SOCK=$(cat "$DIR/run/socket_dir")
  # Jobs first, so no job outlives its slurmd.
  if [ -e "$DIR/slurm.conf" ]; then
    SLURM_CONF="$DIR/slurm.conf" timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
  fi
  local pids=()
  for f in "$DIR"/run/*.daemon; do
    [ -e "$f" ] && pids+=("$(cat "$f")")
  done
  [ -n "$SOCK" ] && [ -e "$SOCK/munge/munged.pid" ] && pids+=("$(cat "$SOCK/munge/munged.pid")")
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  local deadline=$((SECONDS + 20))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  # Job processes slurmd started and left behind (linuxproc tracks by
  # parentage only): those of a job (SLURM_JOB_ID) of this cluster, never
  # this script or the shell that runs it (they may have SLURM_CONF too).
  local pid env_text
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = $$ ] || [ "$pid" = "$PPID" ] && continue
    # (2> first: a process that is gone, or not ours to read, is skipped quietly)
    env_text=$(tr '\0' '\n' 2>/dev/null < "$p/environ") || continue
    if grep -qx "SLURM_CONF=$DIR/slurm.conf" <<< "$env_text" &&
       grep -q "^SLURM_JOB_ID=" <<< "$env_text"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  if grep -q "# stint-slurm $DIR\$" /etc/hosts; then
    # /etc/hosts may be a bind mount: rewrite it in place, never replace it.
    local kept
    kept=$(grep -v "# stint-slurm $DIR\$" /etc/hosts)
    printf '%s\n' "$kept" > /etc/hosts
  fi
  case "$SOCK" in /tmp/stint-slurm.*) rm -rf "$SOCK";; esac
  rm -rf "$DIR"
}

[ $# -ge 2 ] || usage
CMD=$1
DIR=$2
shift 2
NODES=3 GPUS=4 PREFIX=stint GRACE=30 KILL_WAIT=15
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=$2; shift 2;;
    --gpus) GPUS=$2; shift 2;;
    --prefix) PREFIX=$2; shift 2;;
    --grace) GRACE=$2; shift 2;;
    --kill-wait) KILL_WAIT=$2; shift 2;;
    *) usage;;
  esac
done
case "$CMD" in
  start) start;;
  stop) stop;;
  env) echo "export SLURM_CONF=$(cd "$DIR" && pwd)/slurm.conf";;
  *) usage;;
esac
