#!/bin/bash
# A real one-node Slurm cluster on this Debian 12 host, brought up by hand (no systemd), for trying the
# sbatch/srun patterns and preemption (scancel) against the ranzcr binary. Run as root:
#
#   scripts/slurm/local-slurm.sh up       # apt-get install slurm-wlm munge (once), write slurm.conf, start
#                                         # munged, slurmctld and slurmd; waits until sinfo shows the node idle
#   scripts/slurm/local-slurm.sh status   # daemons, sinfo, squeue
#   scripts/slurm/local-slurm.sh down     # stops slurmd, slurmctld and the munged that `up` started
#
# Everything is idempotent: `up` on a running cluster only restarts the daemons when slurm.conf changed.
# Environment:
#   LOCAL_SLURM_STATE   state folder: spool, logs, pid files, job completion log (default /var/spool/slurm-local)
#   LOCAL_SLURM_CONF    slurm.conf to write (default /etc/slurm/slurm.conf, where the client commands look)
#   LOCAL_SLURM_NO_APT  1: never run apt-get (the packages must be installed already)
#
# The configuration has no cgroup plugins (proctrack/linuxproc, task/none), so it works in containers and VMs
# without a delegated cgroup v2 tree; no accounting daemon (sacct does not work: the job's final state is in
# $LOCAL_SLURM_STATE/jobcomp.log and, for MinJobAge seconds, in `scontrol show job`). Logs:
# $LOCAL_SLURM_STATE/slurmctld.log, slurmd.log, munged.log.
set -euo pipefail

STATE=${LOCAL_SLURM_STATE:-/var/spool/slurm-local}
CONF=${LOCAL_SLURM_CONF:-/etc/slurm/slurm.conf}
MARKER="# written by ranzcr scripts/slurm/local-slurm.sh"
HOST=$(hostname -s)

log() { echo "local-slurm: $*" >&2; }
die() {
  echo "local-slurm: error: $*" >&2
  exit 1
}

need_root() { [[ $(id -u) -eq 0 ]] || die "run as root (it installs packages and starts system daemons)"; }

# The pid in FILE if that process is alive, else nothing (and a non-zero status).
alive_pid() {
  local file=$1 pid
  [[ -s $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    && command -v sbatch >/dev/null; then
    return 0
  fi
  [[ ${LOCAL_SLURM_NO_APT:-0} == 1 ]] && die "slurm-wlm/munge are not installed and LOCAL_SLURM_NO_APT=1"
  log "installing slurm-wlm and munge (apt-get)"
  # Keep the packages' init scripts from starting the daemons: this script starts them itself. A
  # policy-rc.d that is already there (container images have one) is left alone.
  local made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  local rc=0
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge || rc=$?
  if [[ $made_policy == 1 ]]; then rm -f /usr/sbin/policy-rc.d; fi
  [[ $rc -eq 0 ]] || die "apt-get install slurm-wlm munge failed (status $rc)"
}

start_munge() {
  install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -m 0755 "$STATE"
  if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile=/etc/munge/munge.key --force
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return 0 # a munged (ours or the system's) already answers
  fi
  touch "$STATE/munged.log"
  chown munge:munge "$STATE/munged.log"
  rm -f /run/munge/munged.pid
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --log-file="$STATE/munged.log" --pid-file=/run/munge/munged.pid

  for _ in $(seq 1 50); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
      cp /run/munge/munged.pid "$STATE/munged.started-by-us"
      return 0
    fi
    sleep 0.2
  done
  die "munged does not answer (see $STATE/munged.log)"
}

write_conf() {
  local cpus boards sockets cores threads mem probe
  # The hardware as slurmd sees it; the node name is `hostname -s`.
  probe=$(slurmd -C 2>/dev/null | head -n1 || true)
  field() { sed -n "s/.*[[:space:]]$1=\\([0-9]*\\).*/\\1/p" <<<"$probe"; }
  cpus=$(field CPUs)
  boards=$(field Boards)
  sockets=$(field SocketsPerBoard)
  cores=$(field CoresPerSocket)
  threads=$(field ThreadsPerCore)
  mem=$(field RealMemory)
  [[ -n $cpus ]] || cpus=$(nproc)
  [[ -n $mem ]] || mem=$(($(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024))
  local topo=""
  if [[ -n $boards && -n $sockets && -n $cores && -n $threads ]] \
    && ((boards * sockets * cores * threads == cpus)); then
    topo=" Boards=$boards SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads"
  fi
  # A little less memory than the machine has, so that slurmd's own count is never below it.
  mem=$((mem > 1024 ? mem - 256 : mem))
  install -d -m 0755 "$(dirname "$CONF")" "$STATE" "$STATE/ctld" "$STATE/d"
  local tmp
  tmp=$(mktemp "$CONF.XXXXXX")
  cat >"$tmp" <<EOF
$MARKER
# One host, no cgroups, no accounting. State and logs under $STATE.
ClusterName=local
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$HOST CPUs=$cpus$topo RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  chmod 0644 "$tmp"
  if [[ -e $CONF ]] && cmp -s "$tmp" "$CONF"; then
    rm -f "$tmp"
    return 1 # unchanged
  fi
  if [[ -e $CONF ]] && ! grep -qF "$MARKER" "$CONF"; then
    cp -p "$CONF" "$CONF.before-local-slurm"
    log "kept the previous $CONF as $CONF.before-local-slurm"
  fi
  mv -f "$tmp" "$CONF"
  log "wrote $CONF (node $HOST, $cpus CPUs, ${mem} MB)"
  return 0
}

stop_daemon() { # NAME PIDFILE
  local name=$1 file=$2 pid
  pid=$(alive_pid "$file") || return 0
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "$name did not stop in 10 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

node_state() { sinfo -h -N -n "$HOST" -o '%t' 2>/dev/null | head -n1; }

cmd_up() {
  need_root
  install_packages
  # Jobs use the first host of SLURM_JOB_NODELIST as the rendezvous address: it must resolve.
  getent hosts "$HOST" >/dev/null \
    || log "warning: $HOST does not resolve (add '127.0.1.1 $HOST' to /etc/hosts): slurmd and the app's rendezvous need it"
  start_munge
  local changed=0
  if write_conf; then changed=1; fi
  export SLURM_CONF=$CONF
  if [[ $changed == 1 ]]; then
    stop_daemon slurmd "$STATE/slurmd.pid"
    stop_daemon slurmctld "$STATE/slurmctld.pid"
  fi
  if ! alive_pid "$STATE/slurmctld.pid" >/dev/null; then
    log "starting slurmctld (log $STATE/slurmctld.log)"
    slurmctld -f "$CONF"
  fi
  if ! alive_pid "$STATE/slurmd.pid" >/dev/null; then
    log "starting slurmd (log $STATE/slurmd.log)"
    slurmd -f "$CONF"
  fi
  local st=""
  for _ in $(seq 1 120); do
    st=$(node_state)
    case $st in
      idle | mix | alloc | comp) break ;;
      drain* | down* | fail*)
        # Left over from an earlier run (a killed slurmd, a reboot): bring it back.
        scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
        ;;
    esac
    sleep 0.5
  done
  case $st in
    idle | mix | alloc | comp) ;;
    *) die "node $HOST is '${st:-unknown}' after 60 s (see $STATE/slurmctld.log and $STATE/slurmd.log)" ;;
  esac
  if [[ $st != idle ]]; then log "node $HOST is $st (jobs are running)"; fi
  sinfo
}

cmd_down() {
  need_root
  stop_daemon slurmd "$STATE/slurmd.pid"
  stop_daemon slurmctld "$STATE/slurmctld.pid"
  if [[ -s $STATE/munged.started-by-us ]]; then
    stop_daemon munged "$STATE/munged.started-by-us"
    rm -f "$STATE/munged.started-by-us"
  fi
  log "down"
}

cmd_status() {
  local name file pid
  for name in munged slurmctld slurmd; do
    case $name in
      munged) file=/run/munge/munged.pid ;;
      *) file=$STATE/$name.pid ;;
    esac
    if pid=$(alive_pid "$file"); then echo "$name: running (pid $pid)"; else echo "$name: not running"; fi
  done
  if command -v sinfo >/dev/null && alive_pid "$STATE/slurmctld.pid" >/dev/null; then
    sinfo || true
    squeue || true
  fi
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
