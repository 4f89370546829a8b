#!/bin/bash
# testbed.sh - hdet's multi-host test bed: K fake hosts on this machine made of
# network namespaces (scripts/testbed/, a copy of shared/netns-cluster with its
# NOTES.md traps handled), optionally with a multi-node Slurm (one slurmd per host).
#
#   scripts/testbed.sh up [--slurm]   tear down what a failed run left, then build
#   scripts/testbed.sh down           stop Slurm, kill what runs in the hosts, remove all
#   scripts/testbed.sh slurm          (re)start the bed's Slurm daemons that are missing
#                                     or whose nodes are down (after a host was frozen)
#   scripts/testbed.sh run [--slurm] CMD...
#                                     take the lock, up, run CMD with the bed's
#                                     environment, down (also when CMD fails)
#
# up/down do not lock: callers that hold $HDET_TESTBED_LOCK (run, the Go tests)
# use them. Names and addresses are hdet's own so the bed does not collide with
# another netns cluster on the machine: hosts hdnode1..K, bridge hdbr0, subnet
# 10.218.7.0/24, slurmctld on port 16917. Environment after up: $STATE/env.sh
# (mpirun: rsh agent, TCP only) and, with --slurm, $STATE/slurm/env.sh.
#   HDET_TESTBED_HOSTS (3)   HDET_TESTBED_SLOTS (2)   HDET_TESTBED_STATE (/tmp/hdet-testbed)
#   HDET_TESTBED_LOCK (/tmp/hdet-testbed.lock)
# A second bed beside this one (the hosts are still its namespaces on one
# bridge) takes other names, state, lock and subnet:
#   HDET_TESTBED_PREFIX (hdnode)   HDET_TESTBED_BRIDGE (hdbr0)   HDET_TESTBED_SUBNET (10.218.7.0/24)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TB=$HERE/testbed
STATE=${HDET_TESTBED_STATE:-/tmp/hdet-testbed}
export NETNS_HOSTS=${HDET_TESTBED_HOSTS:-3} NETNS_SLOTS=${HDET_TESTBED_SLOTS:-2}
export NETNS_PREFIX=${HDET_TESTBED_PREFIX:-hdnode} NETNS_BRIDGE=${HDET_TESTBED_BRIDGE:-hdbr0}
export NETNS_SUBNET=${HDET_TESTBED_SUBNET:-10.218.7.0/24} NETNS_UTS=1
export NETNS_STATE_DIR=$STATE NETNS_KILL_WAIT=2
export SLURM_MULTI_DIR=$STATE/slurm SLURM_CTLD_PORT=16917 SLURM_NODE_CPUS=4
LOCK=${HDET_TESTBED_LOCK:-/tmp/hdet-testbed.lock}

die() { echo "testbed.sh: $*" >&2; exit 2; }

down() {
	"$TB/slurm-multi-down.sh" --purge >/dev/null 2>&1 || true
	if [ -e "$STATE/cluster.env" ]; then
		"$TB/netns-down.sh"
	fi
}

up() {
	[ "$(id -u)" = 0 ] || die "needs root (network namespaces, a bridge, /etc/hosts)"
	down >/dev/null 2>&1 || true
	NETNS_CHECK=${NETNS_CHECK:-1} "$TB/netns-up.sh"
	if [ "${1:-}" = --slurm ]; then
		"$HERE/deps.sh" slurm
		"$TB/slurm-multi-up.sh"
	fi
}

[ $# -ge 1 ] || die "usage: $0 up [--slurm] | down | slurm | run [--slurm] CMD..."
cmd=$1
shift
case $cmd in
up) up "$@" ;;
down) down ;;
slurm) "$TB/slurm-multi-up.sh" ;;
run)
	slurm=
	if [ "${1:-}" = --slurm ]; then slurm=--slurm; shift; fi
	[ $# -ge 1 ] || die "run needs a command"
	exec 9>"$LOCK"
	flock -w 900 9 || die "another test bed run holds $LOCK"
	trap down EXIT
	up $slurm
	# shellcheck disable=SC1091
	. "$STATE/env.sh"
	# shellcheck disable=SC1091
	if [ -n "$slurm" ]; then . "$STATE/slurm/env.sh"; fi
	"$@"
	;;
*) die "unknown command '$cmd' (want up, down, slurm or run)" ;;
esac
