#!/bin/bash
# A single-node Slurm cluster for tests, everything (config, state, logs,
# munge key, stand-in GPU devices) under one directory; only munge's socket
# lives in a directory of its own under /tmp (see write_config). Follows
# shared/SLURM-NOTES.md: Debian's slurmctld/slurmd/munge, no cgroups, PMIx,
# 8 GPUs backed by character devices, a partition named "debug".
#
#   scripts/slurm-cluster.sh up DIR    install if missing, start, wait until idle
#   scripts/slurm-cluster.sh down DIR  stop the daemons started by "up DIR"
#   scripts/slurm-cluster.sh env DIR   print the export that client commands need
#
# Each cluster picks free ports, so a cluster left running elsewhere does not
# get in the way. "up" on a DIR whose cluster is healthy does nothing; one
# whose daemons died is stopped and started afresh.
set -euo pipefail

PACKAGES="slurmctld slurmd slurm-client munge"
NGPUS=8

die() { echo "slurm-cluster: $*" >&2; exit 1; }

usage() { die "usage: $0 up|down|env DIR"; }

[ $# -eq 2 ] || usage
CMD=$1
DIR=$(realpath -m "$2")
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfile() { # PIDFILE: TERM, then KILL after 5 s
	local f=$1 pid i
	[ -s "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for i in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

down() {
	# slurmd first: it kills the job steps it runs when it stops.
	stop_pidfile "$DIR/run/slurmd.pid"
	stop_pidfile "$DIR/run/slurmctld.pid"
	stop_pidfile "$DIR/run/munged.pid"
	if [ -s "$DIR/run/munge-socket-dir" ]; then
		rm -rf "$(cat "$DIR/run/munge-socket-dir")"
		rm -f "$DIR/run/munge-socket-dir"
	fi
}

healthy() {
	alive "$DIR/run/munged.pid" && alive "$DIR/run/slurmctld.pid" && alive "$DIR/run/slurmd.pid" &&
		scontrol ping 2>/dev/null | grep -q 'is UP' &&
		sinfo -h -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'
}

install() {
	local missing=() p
	for p in $PACKAGES; do
		dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
		die "missing packages: ${missing[*]}; install them with: apt-get install -y --no-install-recommends $PACKAGES"
	fi
	echo "slurm-cluster: installing ${missing[*]}" >&2
	# Other installs may hold the dpkg lock: wait for it rather than fail.
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
		"${missing[@]}" >&2 ||
		die "apt-get could not install ${missing[*]} (try: apt-get update)"
}

free_port() { # a TCP port below the kernel's ephemeral range that no socket uses
	local lo p
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
	[ "$lo" -gt 12000 ] || lo=32768
	while :; do
		p=$((10000 + RANDOM % (lo - 10000)))
		# Any socket on the port, not only listeners: a daemon cannot bind
		# a port that an outgoing connection holds.
		ss -Htan "( sport = :$p )" | grep -q . || { echo "$p"; return; }
	done
}

# wait_for SECONDS COMMAND...: poll COMMAND every 0.2 s; false when it never
# succeeds.
wait_for() {
	local secs=$1 i
	shift
	for i in $(seq $((secs * 5))); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

# why WHAT: what the daemons say when WHAT did not happen, for the test log.
why() {
	local f
	echo "slurm-cluster: $1 did not happen in $DIR"
	for f in munged slurmctld slurmd; do
		alive "$DIR/run/$f.pid" && echo "  $f running" || echo "  $f NOT running"
	done
	echo "  sinfo: $(timeout 10 sinfo -h -N -o '%N %T %E' 2>&1 | tr '\n' ' ')"
	for f in slurmctld slurmd; do
		echo "  --- $f.log (end)"
		tail -n 15 "$DIR/log/$f.log" 2>/dev/null | sed 's/^/  /'
	done
} >&2

# need WHAT COMMAND...: run COMMAND; when it fails, say why WHAT did not
# happen and fail.
need() {
	local what=$1
	shift
	"$@" || { why "$what"; return 1; }
}

write_config() {
	local node ctld_port slurmd_port cpus sockdir
	# slurmctld insists that SlurmctldHost is this machine's short name.
	node=$(hostname -s)
	ctld_port=$(free_port)
	slurmd_port=$(free_port)
	while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
	# More CPUs than the machine has (with config_overrides) so that -n 4 on
	# two cores and one task per stand-in GPU can run.
	cpus=$(nproc)
	[ "$cpus" -ge $NGPUS ] || cpus=$NGPUS

	mkdir -p "$DIR"/{run,log,state,spool,munge,dev}
	# munged wants every directory above its socket open to all, which a
	# private temporary DIR (Go's t.TempDir is 0700) is not: the socket gets a
	# short directory of its own in /tmp, removed by "down".
	sockdir=$(mktemp -d /tmp/hdet-munge.XXXXXX)
	chmod 0755 "$sockdir"
	echo "$sockdir" >"$DIR/run/munge-socket-dir"
	SOCKET=$sockdir/munge.socket
	for i in $(seq 0 $((NGPUS - 1))); do
		# Slurm's gpu plugin wants device files; these are /dev/null's numbers.
		[ -c "$DIR/dev/nvidia$i" ] || mknod "$DIR/dev/nvidia$i" c 1 3
	done
	cat >"$CONF" <<EOF
# Written by scripts/slurm-cluster.sh: a single-node test cluster.
ClusterName=hdettest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No usable cgroups in the sandbox.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=pmix
KillWait=5
ReturnToService=2
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus Gres=gpu:$NGPUS State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
	echo "NodeName=$node Name=gpu File=$DIR/dev/nvidia[0-$((NGPUS - 1))]" >"$DIR/gres.conf"
	echo "$node" >"$DIR/nodename"
}

# start: one attempt to start the daemons on fresh ports; false (after
# saying why) when one of them does not come up in time.
start() {
	down
	rm -rf "$DIR"/{state,spool,log}
	write_config

	[ -f "$DIR/munge/munge.key" ] || mungekey -c -k "$DIR/munge/munge.key"
	chmod 0700 "$DIR/munge"
	chmod 0600 "$DIR/munge/munge.key"
	need "munged start" munged -S "$SOCKET" --key-file "$DIR/munge/munge.key" \
		--pid-file "$DIR/run/munged.pid" --log-file "$DIR/log/munged.log" \
		--seed-file "$DIR/munge/munged.seed" &&
		need "munged pid file" wait_for 10 alive "$DIR/run/munged.pid" &&
		need "slurmctld start" slurmctld -c -f "$CONF" &&
		need "scontrol ping UP" wait_for 30 sh -c 'scontrol ping | grep -q "is UP"' &&
		need "slurmd start" slurmd -f "$CONF" -N "$(cat "$DIR/nodename")" &&
		need "node idle" wait_for 30 sh -c 'sinfo -h -o %T | grep -qx idle'
}

# Three attempts: on a busy machine a daemon can lose its port or its start
# to something else; each attempt says why it failed.
up() {
	local attempt
	install
	mkdir -p "$DIR"
	if [ -f "$CONF" ] && healthy; then
		echo "slurm-cluster: already up in $DIR" >&2
		return 0
	fi
	for attempt in 1 2 3; do
		if start; then
			echo "slurm-cluster: up in $DIR ($(sinfo -h -o '%P %D nodes %c CPUs %G %T'))" >&2
			return 0
		fi
		echo "slurm-cluster: attempt $attempt of 3 failed" >&2
	done
	down
	die "the cluster did not come up in 3 attempts; logs under $DIR/log"
}

case $CMD in
up) up ;;
down) down ;;
env) echo "export SLURM_CONF=$CONF" ;;
*) usage ;;
esac
