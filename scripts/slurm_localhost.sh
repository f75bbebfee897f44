#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the cluster launcher's tests and docs
# (hydra/launcher=submitit_slurm; tests/test_slurm.py, docs/training.md "Cluster (SLURM)").
#
#   bash scripts/slurm_localhost.sh         # install (first time), configure, start; prints "SLURM ready: ..."
#   bash scripts/slurm_localhost.sh stop    # stop slurmd, slurmctld and munged (installed packages stay)
#
# As root on Debian 12 without systemd (the daemons are started directly, in the background):
# installs Debian's slurm-wlm and munge with apt-get, creates a munge key if there is none, writes
# /etc/slurm/slurm.conf for this host (one node, `hostname -s`, with the CPUs and memory `slurmd -C`
# reports; one partition, debug, the default; select/cons_tres with CR_CPU so that several 1-CPU jobs
# run at once; no accounting, no cgroups), starts munged, slurmctld and slurmd, and waits until
# `sinfo` shows the node idle. Idempotent: when the cluster is already up with the same configuration
# it only checks and prints the ready line (a changed configuration restarts the SLURM daemons).
# Logs: /var/log/slurm/{slurmctld,slurmd}.log, /var/log/munge/munged.log; state: /var/lib/slurm.
# Stopping by hand does the same as `stop`: scontrol shutdown; kill "$(cat /run/munge/munged.pid)".
set -euo pipefail

PARTITION=${TRANSFERDX_SLURM_PARTITION:-debug} # the test reads the same variable
CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
RUN_DIR=/run/slurm
NODE=$(hostname -s)

log() { echo "slurm_localhost: $*" >&2; }
die() {
  log "$*"
  exit 1
}
# the pid in pid file $1 when that process is daemon $2 (a stale file's pid may belong to another)
pid_of() { [ -s "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ] && cat "$1"; }
alive() { pid_of "$1" "$2" >/dev/null; }
wait_gone() { # pids: wait up to 20 s for them to exit
  local pid left
  for _ in $(seq 100); do
    left=
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left=yes; done
    [ -z "$left" ] && return 0
    sleep 0.2
  done
  return 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts daemons)"

stop_slurm() { # slurmctld and slurmd: scontrol shutdown, then a TERM for any that is left
  local pids
  pids=$(pid_of "$RUN_DIR/slurmctld.pid" slurmctld; pid_of "$RUN_DIR/slurmd.pid" slurmd) || true
  [ -n "$pids" ] || return 0
  scontrol shutdown >/dev/null 2>&1 || true
  # shellcheck disable=SC2086 # one pid a word
  wait_gone $pids || { kill $pids 2>/dev/null || true; wait_gone $pids; } || die "could not stop $pids"
}

stop_cluster() {
  local munged
  stop_slurm
  if munged=$(pid_of /run/munge/munged.pid munged); then
    kill "$munged"
    wait_gone "$munged" || die "munged ($munged) did not stop"
  fi
  log "stopped"
}

if [ "${1:-start}" = stop ]; then
  stop_cluster
  exit 0
elif [ "${1:-start}" != start ]; then
  die "usage: $0 [start|stop]"
fi

# 1. Packages. Service starts during the install are suppressed (a policy-rc.d that says 101, only
# when the machine has none): without systemd and before slurm.conf exists they could only fail.
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null ||
  ! command -v munged >/dev/null; then
  log "installing slurm-wlm and munge with apt-get"
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    policy=/usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
  if [ -n "$policy" ]; then
    rm -f "$policy"
    trap - EXIT
  fi
fi

# 2. munge: a key (the package's postinst makes one; a machine without it gets one here), then munged.
install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating /etc/munge/munge.key"
  runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! alive /run/munge/munged.pid munged; then
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged
fi
for _ in $(seq 50); do
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
  sleep 0.2
done
munge -n | unmunge >/dev/null || die "munge does not work (see /var/log/munge/munged.log)"

# 3. slurm.conf for this one node. `slurmd -C` prints the node line as slurmd will find it (CPUs,
# sockets, cores, threads, RealMemory); a node configured with more than it has would be drained.
install -d -o slurm -g slurm -m 0755 /var/lib/slurm /var/lib/slurm/slurmctld /var/log/slurm "$RUN_DIR"
install -d -m 0755 /var/lib/slurm/slurmd "$CONF_DIR"
hardware=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //')
[ -n "$hardware" ] || die "slurmd -C printed no node line"
new_conf=$(
  cat <<EOF
# Written by scripts/slurm_localhost.sh: a one-node cluster on this host (see that script).
ClusterName=localhost
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
MailProg=/bin/true
NodeName=$NODE NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
)
changed=
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$new_conf" ]; then
  printf '%s\n' "$new_conf" >"$CONF"
  changed=yes
fi

# 4. The daemons (slurmctld drops to SlurmUser; slurmd runs as root to start jobs as their users).
if [ -n "$changed" ] && { alive "$RUN_DIR/slurmctld.pid" slurmctld || alive "$RUN_DIR/slurmd.pid" slurmd; }; then
  log "slurm.conf changed: restarting the SLURM daemons"
  stop_slurm
fi
if ! alive "$RUN_DIR/slurmctld.pid" slurmctld; then
  log "starting slurmctld"
  slurmctld
fi
if ! alive "$RUN_DIR/slurmd.pid" slurmd; then
  log "starting slurmd"
  slurmd
fi

# 5. Ready when the node is idle (or already running jobs); a node left down by an unclean stop is resumed.
state=
for i in $(seq 150); do
  state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1 || true)
  case "$state" in
    idle | mixed | allocated | completing) break ;;
    down* | drain*)
      if [ "$i" -eq 10 ]; then
        scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
      fi
      ;;
  esac
  sleep 0.2
done
case "$state" in
  idle | mixed | allocated | completing) ;;
  *) die "node $NODE is '${state:-not reported}' after 30 s (see /var/log/slurm/slurmctld.log, slurmd.log)" ;;
esac
echo "SLURM ready: node $NODE ($state, $(sinfo -h -n "$NODE" -o %c) CPUs), partition $PARTITION ($(sinfo --version))"
