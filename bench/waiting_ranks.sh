#!/usr/bin/env bash
# What a waiting rank should do: the training suite's data-parallel steps
# (bench/training.cpp, dp = 2, ZeRO-0 and ZeRO-3, 2 ranks bound one per
# core) with Open MPI's waiting ranks busy-polling (mpi_yield_when_idle=0)
# and yielding their core (=1), on a quiet machine and with one busy
# process beside them (a loaded one), in alternating rounds. Prints the
# median step of each case (docs/11-training-speed.md).
#
#   bench/waiting_ranks.sh [ROUNDS]      (after building bench_training)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -z "${SHARDMESH_IN_TOOLCHAIN:-}" ]]; then exec "$here/../tools/toolchain" "$here/$(basename "$0")" "$@"; fi
cd "$here/.."
rounds=${1:-3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 SHARDMESH_BENCH_ROUNDS=1
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for load in quiet loaded; do
  hog=
  if [[ $load == loaded ]]; then
    (while :; do :; done) &
    hog=$!
  fi
  for _ in $(seq 1 "$rounds"); do
    for yield in 0 1; do
      OMPI_MCA_mpi_yield_when_idle=$yield tools/mpirun --bind 2 build/release/bench/bench_training \
        --benchmark_filter='dp2_zero[03]' 2>/dev/null | grep manual_time |
        awk -v y="$yield" -v l="$load" '{split($1, n, "/"); print l, n[2] "/" n[3], "yield=" y, $2}' >>"$results"
    done
  done
  [[ -n $hog ]] && kill "$hog"
done
python3 - "$results" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    load, case, choice, ms = line.split()
    times[(case, load, choice)].append(float(ms))
print("| model/run | machine | busy-polling ms | yielding ms | yielding / polling |")
print("|---|---|---|---|---|")
for case, load in sorted({(c, l) for c, l, _ in times}):
    poll, give = (statistics.median(times[(case, load, f"yield={y}")]) for y in (0, 1))
    print(f"| {case} | {load} | {poll:.3g} | {give:.3g} | {give / poll:.2f} |")
PY
