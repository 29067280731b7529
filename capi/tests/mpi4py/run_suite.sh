#!/usr/bin/env bash
# run_suite.sh PREFIX NP [--all | MAIN_PY_ARGS...] -- run mpi4py's own test suite on the
# gmpi installed in PREFIX, on NP ranks.
#
# Downloads the sdist of the mpi4py version installed in $GMPI_PYTHON (default
# /opt/gmpi-py/bin/python; `pip download --no-binary :all: --no-deps mpi4py==VER`, cached
# under $SUITE_DIR, default /tmp/gmpi-mpi4py-suite-VER), takes its test/ directory, and runs
#     $LAUNCHER -np NP $GMPI_PYTHON test/main.py -v <selection>
# with the environment that makes mpi4py's wheel load PREFIX/lib/libmpi.so.12:
#     MPI4PY_LIBMPI=PREFIX/lib/libmpi.so.12   (dlopen'ed by mpi4py._mpiabi to pick the ABI)
#     LD_LIBRARY_PATH=PREFIX/lib              (resolves MPI.mpich*.so's NEEDED libmpi.so.12)
# The default selection is the core files: test_p2p*, test_cco*, test_comm*, test_datatype*
# (main.py's `-i REGEX` matches test file names); `--all` runs every file; any other extra
# arguments replace the selection and go to main.py as they are (e.g. `-i test_rma -x
# test_rma.TestRMASelf.testPutGet`; see `python test/main.py --help`).
#
# Each rank's output goes to $LOG_DIR/rank.R.log (default: $SUITE_DIR/logs-np<NP>/); the
# script prints one summary line per rank and exits with the launcher's status.
#
# Environment: LAUNCHER (default PREFIX/bin/gmpirun; e.g. "mpirun.mpich" for a baseline),
# GMPI_PYTHON, SUITE_DIR, LOG_DIR, SUITE_TIMEOUT (seconds, default 1800).
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 PREFIX NP [--all | main.py args...]" >&2; exit 2; }
prefix=$(cd "$1" && pwd -P)
np=$2
shift 2
python=${GMPI_PYTHON:-/opt/gmpi-py/bin/python}
launcher=${LAUNCHER:-$prefix/bin/gmpirun}

fail() { echo "FAIL mpi4py suite: $*" >&2; exit 1; }

[ -e "$prefix/lib/libmpi.so.12" ] || fail "$prefix/lib/libmpi.so.12 missing"
version=$("$python" -c 'import mpi4py; print(mpi4py.__version__)') ||
    fail "mpi4py is not importable by $python"

suite=${SUITE_DIR:-${TMPDIR:-/tmp}/gmpi-mpi4py-suite-$version}
if [ ! -f "$suite/test/main.py" ]; then
    mkdir -p "$suite"
    "$python" -m pip download --quiet --no-binary :all: --no-deps "mpi4py==$version" -d "$suite"
    tar -xzf "$suite/mpi4py-$version.tar.gz" -C "$suite" "mpi4py-$version/test"
    rm -rf "$suite/test"
    mv "$suite/mpi4py-$version/test" "$suite/test"
    rmdir "$suite/mpi4py-$version"
fi

if [ $# -eq 0 ]; then
    set -- -i test_p2p -i test_cco -i test_comm -i test_datatype
elif [ "$1" = --all ]; then
    shift
fi

export MPI4PY_LIBMPI=$prefix/lib/libmpi.so.12
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset MPI4PY_MPIABI

# Check once, in one process, that mpi4py picks the MPICH flavour and gmpi's library.
"$python" - "$prefix" <<'PY' || fail "mpi4py does not load $prefix/lib/libmpi.so.12"
import os, sys
from mpi4py import MPI, _mpiabi
prefix = sys.argv[1]
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libmpi" in l or "libmpich" in l]
libs = sorted(set(os.path.realpath(p) for p in maps if p.startswith("/")))
want = os.path.realpath(os.path.join(prefix, "lib", "libmpi.so.12"))
print(f"mpi4py {__import__('mpi4py').__version__}: ABI {_mpiabi._get_mpiabi()!r}, "
      f"extension {os.path.basename(MPI.__file__)}, library {libs}")
print(f"MPI_Get_library_version: {MPI.Get_library_version().splitlines()[0].strip()!r}; "
      f"vendor {MPI.get_vendor()}")
assert _mpiabi._get_mpiabi() == "mpich", _mpiabi._get_mpiabi()
assert libs == [want], (libs, want)
PY

logs=${LOG_DIR:-$suite/logs-np$np}
mkdir -p "$logs"
rm -f "$logs"/rank.*.log
echo "running: $launcher -np $np $python test/main.py -v $* (logs in $logs)"
set +e
(cd "$suite" && timeout "${SUITE_TIMEOUT:-1800}" $launcher -np "$np" /bin/sh -c '
    r=${GMPI_RANK:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}}}
    log=$1; shift
    exec "$@" >"$log/rank.$r.log" 2>&1' sh "$logs" "$python" test/main.py -v "$@")
status=$?
set -e

for f in "$logs"/rank.*.log; do
    [ -e "$f" ] || continue
    r=${f##*/rank.}; r=${r%.log}
    ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$f" | tail -n 1 || true)
    result=$(grep -E '^(OK|FAILED)( \(.*\))?$' "$f" | tail -n 1 || true)
    ok=$(grep -cE ' \.\.\. ok$' "$f" || true)
    skipped=$(grep -cE ' \.\.\. skipped' "$f" || true)
    failed=$(grep -cE ' \.\.\. FAIL$' "$f" || true)
    errors=$(grep -cE ' \.\.\. ERROR$' "$f" || true)
    xfail=$(grep -cE ' \.\.\. expected failure$' "$f" || true)
    echo "rank $r: ran ${ran:-?}: $ok ok, $failed failed, $errors errors, $skipped skipped," \
        "$xfail expected failures -- ${result:-NO RESULT (crashed or timed out?)}"
done
# Per test file, from rank 0's verbose output (tests whose own output split their
# "... ok" line are not counted here).
if [ -e "$logs/rank.0.log" ]; then
    echo "rank 0 by test file (ok failed errors skipped xfail):"
    awk '
        / \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$/ {
            res = $0; sub(/.* \.\.\. /, "", res); sub(/^skipped.*/, "skipped", res)
            mod = $0; sub(/^[^(]*\(/, "", mod); sub(/\..*/, "", mod)
            n[mod, res]++; mods[mod] = 1
        }
        END {
            for (m in mods)
                printf "  %-24s %5d %5d %5d %5d %5d\n", m, n[m, "ok"], n[m, "FAIL"],
                    n[m, "ERROR"], n[m, "skipped"], n[m, "expected failure"]
        }' "$logs/rank.0.log" | sort
fi
echo "launcher exit status: $status"
exit "$status"
