#!/bin/sh
# shardmesh_isolated_launch.sh COMMAND...
# Runs COMMAND (an MPI launch) with TMPDIR set to a fresh directory, removed
# afterwards. Open MPI's launcher names its session directory after its pid
# and refuses to start when that directory exists: one left behind by a
# launcher killed earlier (a test that hung) made a later test fail once its
# launcher drew the same pid.
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardmesh-run.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
TMPDIR=$dir "$@"
