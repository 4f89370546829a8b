#!/usr/bin/env bash
# Compares hdet's Go MPI binding with plain C on the same in-place float32
# MPI_Allreduce: 4 ranks, the programs alternating in one invocation (their
# order turning each round), 4 KiB to 256 MiB. Usage:
#   scripts/bench-allreduce.sh BIN_DIR [ROUNDS] [REPS]
# Environment: NP (ranks, 4), SIZES (floats), SIDES (the programs
# BIN_DIR/allreduce-SIDE to alternate, "c go"; the first is the reference).
# Per size: each program's median over rounds of its median per call; each
# other program against the reference, the median of the per-round ratios
# and their range; and for a Go program the ratio to the same calls made
# from C inside it, rep by rep (bench/allreduce-go), the median over rounds
# of its median and quartiles: the machine's load hits both sides of that
# ratio alike.
set -euo pipefail
bin=${1:?usage: bench-allreduce.sh BIN_DIR [ROUNDS] [REPS]}
rounds=${2:-5}
reps=${3:-15}
np=${NP:-4}
sizes=${SIZES:-1024 16384 269322 1048576 4194304 16777216 67108864}
read -r -a sides <<<"${SIDES:-c go}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
	k=$(((r - 1) % ${#sides[@]}))
	for side in "${sides[@]:k}" "${sides[@]:0:k}"; do
		# shellcheck disable=SC2086 # sizes is a list
		mpirun -np "$np" --oversubscribe --bind-to none "$bin/allreduce-$side" "$reps" $sizes |
			awk -v r="$r" -v s="$side" '$1 ~ /^[0-9]+$/ && NF == 2 {print r, s, $0} $1 == "cloop" && NF == 6 {print r, s, $0}' >>"$tmp/all"
	done
done
echo "MPI_Allreduce in place, float32, $np ranks on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $rounds rounds x $reps reps (a fifth past 16 MiB, at least 3); load average before $load0, after $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v ref="${sides[0]}" -v order="${sides[*]}" -f - "$tmp/all" <<'AWK'
# sorted splits s into a, sorted (insertion sort: mawk has no asort).
function sorted(s, a,   n, i, j, x) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++) { x = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
	return n
}
function med(s,   a, n) { n = sorted(s, a); return a[int((n + 1) / 2)] }
function lo(s,   a) { sorted(s, a); return a[1] }
function hi(s,   a, n) { n = sorted(s, a); return a[n] }
$3 == "cloop" { q1[$2, $4] = q1[$2, $4] " " $6; qm[$2, $4] = qm[$2, $4] " " $7; q3[$2, $4] = q3[$2, $4] " " $8; next }
{ t[$1, $2, $3] = $4; all[$2, $3] = all[$2, $3] " " $4; if (!($3 in seen)) { seen[$3] = 1; sizes[++ns] = $3 }; rounds[$1] = 1 }
END {
	nsd = split(order, sd, " ")
	printf "%10s %9s", "floats", "MiB"
	for (i = 1; i <= nsd; i++) printf " %12s", sd[i] " (us)"
	for (i = 2; i <= nsd; i++) printf " %22s", sd[i] "/" ref " [range]"
	for (i = 1; i <= nsd; i++) if ((sd[i], sizes[1]) in qm) printf " %26s", sd[i] "/C-loop [p25..p75]"
	printf "\n"
	for (j = 1; j <= ns; j++) {
		n = sizes[j]
		printf "%10d %9.3f", n, n * 4 / 1048576
		for (i = 1; i <= nsd; i++) printf " %12.1f", med(all[sd[i], n]) * 1e6
		for (i = 2; i <= nsd; i++) {
			rs = ""
			for (r in rounds) if ((r, sd[i], n) in t && (r, ref, n) in t) rs = rs " " t[r, sd[i], n] / t[r, ref, n]
			printf " %8.3f [%5.2f..%5.2f]", med(rs), lo(rs), hi(rs)
		}
		for (i = 1; i <= nsd; i++) if ((sd[i], n) in qm) printf " %10.3f [%5.3f..%5.3f]", med(qm[sd[i], n]), med(q1[sd[i], n]), med(q3[sd[i], n])
		printf "\n"
	}
}
AWK
