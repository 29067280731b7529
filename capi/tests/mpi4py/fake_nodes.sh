#!/bin/sh
# fake_nodes.sh -np N PROG [ARGS...]: run_suite.sh's LAUNCHER for windows
# and communicators that span nodes on one host. It runs $GMPIRUN (gmpirun)
# with each rank on a fake node of its own (GMPI_NODE_NAME=fakeR), so ranks
# meet over tcp and every one-sided window goes by active messages. The
# fake nodes share this host's cores: they get the oversubscribed back-off.
set -eu
[ "${1:-}" = -np ] || { echo "usage: $0 -np N PROG [ARGS...]" >&2; exit 2; }
np=$2
shift 2
exec "${GMPIRUN:?set GMPIRUN to gmpirun}" -np "$np" sh -c \
    'GMPI_NODE_NAME=fake$GMPI_RANK GMPI_SPIN=5 GMPI_YIELDS=4 exec "$0" "$@"' "$@"
