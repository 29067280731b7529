#!/usr/bin/env bash
#
# abi_check.sh -- verify that gmpi's C header (capi/include/mpi.h) is
# ABI- and API-compatible with MPICH's mpi.h.
#
# Checks, in order:
#   1. names:      every identifier gmpi's header defines (macros, enum
#                  constants, typedefs, functions, extern objects) also exists
#                  in MPICH's header, except gmpi-specific GMPI_* names.
#   2. values:     abi_probe.c is compiled against both headers; it prints
#                  MPI_Status layout, sizes/types of all typedefs, and the type
#                  and value of every constant gmpi defines.  Outputs must be
#                  identical.
#   3. signatures: sig_check.c re-declares every gmpi function, extern object
#                  and callback typedef with MPICH's declaration; C11 rejects
#                  any incompatible redeclaration (const-ness included).
#   4. profiling / export list: every MPI_ function has a PMPI_ twin, and
#                  capi/include/functions.txt lists exactly the MPI_ functions.
#   5. language:   the header compiles cleanly as strict C99/C11
#                  (-Wall -Wextra -Werror -pedantic) and as C++98/C++17
#                  (-Wall -Werror -pedantic), using every name it declares.
#   6. optional:   --syms FILE: every name in FILE (one per line) is declared
#                  as a function or extern object by gmpi's header.
#
# Nothing is linked against an MPI library.
#
# Usage: abi_check.sh [--syms FILE] [--keep]
# Environment:
#   MPICH_INC   MPICH include dir (default /usr/include/x86_64-linux-gnu/mpich)
#   MPICH_NEXT_INC  a newer MPICH's include dir (the MPICH 5 wheel's): names
#               gmpi declares that MPICH_INC's header lacks (MPI 4.1's) are
#               checked against this one instead (name, value, signature)
#   CC, CXX     compilers (default gcc, g++)
#   ABI_CHECK_REQUIRE_MPICH=1  fail (instead of skipping checks 1-3) when
#               MPICH's header is not installed.
#
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ours_inc="$(cd "$here/../../include" && pwd)"
mpich_inc="${MPICH_INC:-/usr/include/x86_64-linux-gnu/mpich}"
next_inc="${MPICH_NEXT_INC:-}"
CC="${CC:-gcc}"
CXX="${CXX:-g++}"

syms_file=""
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --syms) syms_file="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "abi_check: unknown argument: $1" >&2; exit 2 ;;
    esac
done

work="$(mktemp -d "${TMPDIR:-/tmp}/gmpi-abi.XXXXXX")"
if [ "$keep" = 1 ]; then
    echo "abi_check: keeping work dir $work"
else
    trap 'rm -rf "$work"' EXIT
fi

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

# Names of macros a header defines (minus the compiler's predefined ones).
# $1 = include dir, $2 = object|function
header_macros() {
    local inc="$1" kind="$2"
    "$CC" -E -dM -x c /dev/null | sort > "$work/predef.txt"
    echo '#include <mpi.h>' | "$CC" -E -dM -x c -I"$inc" - | sort > "$work/all.txt"
    comm -13 "$work/predef.txt" "$work/all.txt" |
        if [ "$kind" = object ]; then
            sed -n -E 's/^#define ([A-Za-z_][A-Za-z0-9_]*)( .*)?$/\1/p'
        else
            sed -n -E 's/^#define ([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/p'
        fi | sort -u
}

# Preprocess a header and print one top-level declaration per line
# (newlines folded, split at ';', whitespace squeezed).
# $1 = include dir
one_decl_per_line() {
    echo '#include <mpi.h>' | "$CC" -E -P -x c -I"$1" - |
        tr '\n' ' ' | tr ';' '\n' |
        sed -E 's/[[:space:]]+/ /g; s/^ //; s/ $//' | grep -v '^$' || true
}

# From one-decl-per-line input: function declarations "name<TAB>decl".
function_decls() {
    grep -v -E '^(typedef|extern|enum|struct|static)\b|[{}]' |
        sed -n -E 's/^[^(]*[^A-Za-z0-9_(]([A-Za-z_][A-Za-z0-9_]*) ?\((.*)\)$/\1\t&/p'
}

# From one-decl-per-line input: extern object declarations "name<TAB>decl".
extern_decls() {
    grep -E '^extern ' | grep -v '(' |
        sed -n -E 's/^.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)( ?\[[^]]*\])?$/\1\t&/p'
}

# From one-decl-per-line input: typedefs without a body, "name<TAB>decl".
typedef_decls() {
    grep -E '^typedef ' | grep -v -E '[{}]' |
        sed -n -E -e 's/^typedef [^(]*\(\*? ?([A-Za-z_][A-Za-z0-9_]*)\) ?\(.*$/\1\t&/p; t' \
                  -e 's/^typedef .*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)$/\1\t&/p'
}

# Enum constants declared in a header's preprocessed text.
enum_constants() {
    echo '#include <mpi.h>' | "$CC" -E -P -x c -I"$1" - | tr '\n' ' ' |
        grep -o -E 'enum[^{;]*\{[^}]*\}' |
        sed -E 's/^enum[^{]*\{//; s/\}$//' | tr ',' '\n' |
        sed -n -E 's/^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*).*/\1/p' | sort -u
}

# --------------------------------------------------------------------------
# Inventory of gmpi's header
# --------------------------------------------------------------------------

[ -f "$ours_inc/mpi.h" ] || { echo "abi_check: $ours_inc/mpi.h not found" >&2; exit 2; }

header_macros "$ours_inc" object   > "$work/ours_obj_macros.txt"
header_macros "$ours_inc" function > "$work/ours_fn_macros.txt"
enum_constants "$ours_inc"         > "$work/ours_enums.txt"
one_decl_per_line "$ours_inc"      > "$work/ours_decls.txt"
function_decls < "$work/ours_decls.txt" | cut -f1 | sort -u > "$work/ours_funcs.txt"
extern_decls   < "$work/ours_decls.txt" | cut -f1 | sort -u > "$work/ours_externs.txt"
typedef_decls  < "$work/ours_decls.txt" | cut -f1 | sort -u > "$work/ours_typedefs.txt"

grep -E '^GMPI_' "$work/ours_obj_macros.txt" > "$work/ours_gmpi.txt" || true
# MPI_VERSION/MPI_SUBVERSION say which standard the library implements, not
# an ABI value: gmpi says 4.1, Debian's MPICH 4.0.2 4.0, MPICH 5 5.0. Every
# other constant must match.
grep -v -E '^(GMPI_|MPI_VERSION$|MPI_SUBVERSION$)' "$work/ours_obj_macros.txt" > "$work/ours_consts.txt" || true

echo "gmpi header: $(wc -l < "$work/ours_consts.txt") constant macros," \
     "$(wc -l < "$work/ours_enums.txt") enum constants," \
     "$(wc -l < "$work/ours_fn_macros.txt") conversion macros," \
     "$(wc -l < "$work/ours_typedefs.txt") typedefs," \
     "$(wc -l < "$work/ours_externs.txt") extern objects," \
     "$(wc -l < "$work/ours_funcs.txt") functions"
echo "gmpi-specific names (not compared): $(tr '\n' ' ' < "$work/ours_gmpi.txt")"

# --------------------------------------------------------------------------
# 4. PMPI twins and functions.txt
# --------------------------------------------------------------------------

grep -E '^MPI_' "$work/ours_funcs.txt" > "$work/ours_mpi_funcs.txt" || true
missing_pmpi="$(sed 's/^/P/' "$work/ours_mpi_funcs.txt" | comm -23 - "$work/ours_funcs.txt")"
orphan_pmpi="$(grep -E '^PMPI_' "$work/ours_funcs.txt" | sed 's/^P//' | comm -23 - "$work/ours_mpi_funcs.txt")"
if [ -n "$missing_pmpi$orphan_pmpi" ]; then
    fail "MPI_/PMPI_ prototypes do not pair up: $missing_pmpi $orphan_pmpi"
else
    pass "every MPI_ function has a PMPI_ twin ($(wc -l < "$work/ours_mpi_funcs.txt") pairs)"
fi

funcs_txt="$ours_inc/functions.txt"
if [ -f "$funcs_txt" ] && diff -u "$funcs_txt" "$work/ours_mpi_funcs.txt" > "$work/functions.diff"; then
    pass "functions.txt matches the header"
else
    fail "functions.txt does not match the MPI_ prototypes of mpi.h:"
    cat "$work/functions.diff" 2>/dev/null || true
fi

# --------------------------------------------------------------------------
# Generated helper headers for the probe and the compile checks
# --------------------------------------------------------------------------

{
    echo "/* generated by abi_check.sh */"
    sed 's/.*/    (void)(&);/' "$work/ours_consts.txt"
    sed 's/.*/    (void)(&);/' "$work/ours_enums.txt"
    sed 's/.*/    (void)&(0);/' "$work/ours_fn_macros.txt"
    sed 's/.*/    (void)(&);/' "$work/ours_externs.txt"
    sed 's/.*/    (void)\&&;/' "$work/ours_funcs.txt"
} > "$work/use_names.h"

# --------------------------------------------------------------------------
# 5. Language checks (need no MPICH)
# --------------------------------------------------------------------------

compile() { # label, command...
    local label="$1"; shift
    if "$@" > "$work/compile.log" 2>&1; then
        pass "$label"
    else
        fail "$label"
        sed 's/^/    /' "$work/compile.log" | head -40
    fi
}

for std in c99 c11; do
    compile "C ($std -Wall -Wextra -Werror -pedantic)" \
        "$CC" -std=$std -Wall -Wextra -Werror -pedantic -I"$work" -I"$ours_inc" \
        -c "$here/compat_c99.c" -o "$work/compat_$std.o"
done
for std in c++98 c++17; do
    compile "C++ ($std -Wall -Werror -pedantic)" \
        "$CXX" -std=$std -Wall -Wextra -Werror -pedantic -I"$work" -I"$ours_inc" \
        -c "$here/compat_cxx.cpp" -o "$work/compat_$std.o"
done

# --------------------------------------------------------------------------
# 6. Optional symbol list (e.g. the MPI symbols mpi4py links against)
# --------------------------------------------------------------------------

if [ -n "$syms_file" ]; then
    sort -u "$work/ours_funcs.txt" "$work/ours_externs.txt" > "$work/ours_symbols.txt"
    grep -v -E '^[[:space:]]*(#|$)' "$syms_file" | tr -d ' \t\r' | sort -u > "$work/syms.txt"
    missing_syms="$(comm -23 "$work/syms.txt" "$work/ours_symbols.txt")"
    if [ -n "$missing_syms" ]; then
        fail "symbols from $syms_file not declared by mpi.h: $(echo $missing_syms)"
    else
        pass "all $(wc -l < "$work/syms.txt") symbols of $syms_file are declared"
    fi
fi

# --------------------------------------------------------------------------
# Checks against MPICH
# --------------------------------------------------------------------------

if [ ! -f "$mpich_inc/mpi.h" ]; then
    if [ "${ABI_CHECK_REQUIRE_MPICH:-0}" = 1 ]; then
        fail "MPICH header not found in $mpich_inc"
    else
        echo "SKIP: MPICH header not found in $mpich_inc (set MPICH_INC); ABI comparison skipped"
    fi
else
    # ---- 1. names ----------------------------------------------------------
    header_macros "$mpich_inc" object   > "$work/mpich_obj_macros.txt"
    header_macros "$mpich_inc" function > "$work/mpich_fn_macros.txt"
    one_decl_per_line "$mpich_inc"      > "$work/mpich_decls_all.txt"
    {
        cat "$work/mpich_obj_macros.txt" "$work/mpich_fn_macros.txt"
        grep -o -E '[A-Za-z_][A-Za-z0-9_]*' "$work/mpich_decls_all.txt"
    } | sort -u > "$work/mpich_names.txt"
    # The newer header, if given: the reference for what MPICH_INC's lacks.
    : > "$work/next_obj_macros.txt"; : > "$work/next_fn_macros.txt"
    : > "$work/next_decls_all.txt"; : > "$work/next_names.txt"
    if [ -n "$next_inc" ]; then
        if [ -f "$next_inc/mpi.h" ]; then
            header_macros "$next_inc" object   > "$work/next_obj_macros.txt"
            header_macros "$next_inc" function > "$work/next_fn_macros.txt"
            one_decl_per_line "$next_inc"      > "$work/next_decls_all.txt"
            {
                cat "$work/next_obj_macros.txt" "$work/next_fn_macros.txt"
                grep -o -E '[A-Za-z_][A-Za-z0-9_]*' "$work/next_decls_all.txt"
            } | sort -u > "$work/next_names.txt"
            echo "newer MPICH header for names the first lacks: $next_inc"
        else
            fail "MPICH_NEXT_INC=$next_inc has no mpi.h"
        fi
    else
        echo "MPICH_NEXT_INC is not set: names MPICH_INC's header lacks (MPI 4.1's) fail the name check"
    fi
    sort -u "$work/mpich_obj_macros.txt" "$work/next_obj_macros.txt" > "$work/any_obj_macros.txt"
    sort -u "$work/mpich_fn_macros.txt" "$work/next_fn_macros.txt" > "$work/any_fn_macros.txt"
    sort -u "$work/mpich_names.txt" "$work/next_names.txt" > "$work/any_names.txt"

    # Object-like macros must stay object-like macros, conversion macros must
    # stay function-like macros; everything else just has to exist.
    check_subset() { # label, ours-file, theirs-file
        local extra
        extra="$(comm -23 "$2" "$3")"
        if [ -n "$extra" ]; then
            fail "$1 not in MPICH's header: $(echo $extra)"
        else
            pass "$1 all exist in MPICH ($(wc -l < "$2"))"
        fi
    }
    check_subset "constant macros"   "$work/ours_consts.txt"    "$work/any_obj_macros.txt"
    check_subset "conversion macros" "$work/ours_fn_macros.txt" "$work/any_fn_macros.txt"
    check_subset "enum constants"    "$work/ours_enums.txt"     "$work/any_names.txt"
    check_subset "typedefs"          "$work/ours_typedefs.txt"  "$work/any_names.txt"
    check_subset "extern objects"    "$work/ours_externs.txt"   "$work/any_names.txt"
    check_subset "functions"         "$work/ours_funcs.txt"     "$work/any_names.txt"
    # Any other identifier appearing in our declarations (struct tags, ...).
    grep -o -E '[A-Za-z_][A-Za-z0-9_]*' "$work/ours_decls.txt" | grep -E 'MPI|ADIO' |
        grep -v -E '^GMPI_' | sort -u > "$work/ours_idents.txt"
    check_subset "other identifiers" "$work/ours_idents.txt"    "$work/any_names.txt"

    # ---- 2. values ---------------------------------------------------------
    {
        echo "/* generated by abi_check.sh */"
        comm -12 "$work/ours_consts.txt" "$work/mpich_obj_macros.txt" | sed 's/.*/    PROBE(&);/'
        comm -12 "$work/ours_enums.txt" "$work/mpich_names.txt"       | sed 's/.*/    PROBE(&);/'
        comm -12 "$work/ours_fn_macros.txt" "$work/mpich_fn_macros.txt" | sed 's/.*/    PROBE_CONV(&);/'
        comm -12 "$work/ours_externs.txt" "$work/mpich_names.txt"     | sed 's/.*/    PROBE_EXTERN(&);/'
    } > "$work/probe_names.h"

    # probe REF_INC LABEL: build abi_probe.c against the reference header
    # and gmpi's with the names of probe_names.h; compare the outputs.
    # With a third argument, only the probed names are compared (the newer
    # header's typedefs differ in spelling, not in size: MPICH 5 says
    # `long long` where MPICH 4 and gmpi say `long`).
    probe() {
        local ref="$1" label="$2" named="${3:-}" probe_ok=1 side inc
        for side in mpich gmpi; do
            if [ "$side" = mpich ]; then inc="$ref"; else inc="$ours_inc"; fi
            if "$CC" -std=c11 -O0 -w -I"$work" -I"$inc" "$here/abi_probe.c" \
                   -o "$work/probe_$side" > "$work/probe_$side.log" 2>&1; then
                if [ -n "$named" ]; then
                    "$work/probe_$side" | grep -E '^(const|extern) ' > "$work/values_$side.txt" || true
                else
                    "$work/probe_$side" > "$work/values_$side.txt"
                fi
            else
                fail "abi_probe.c does not compile against the $side header ($label)"
                sed 's/^/    /' "$work/probe_$side.log" | head -40
                probe_ok=0
            fi
        done
        if [ "$probe_ok" = 1 ]; then
            if diff -u "$work/values_mpich.txt" "$work/values_gmpi.txt" > "$work/values.diff"; then
                pass "layout, typedefs and values identical to $label ($(wc -l < "$work/values_gmpi.txt") probes)"
            else
                fail "layout/typedef/value differences (- $label, + gmpi):"
                cat "$work/values.diff"
            fi
        fi
    }
    probe "$mpich_inc" "MPICH"
    # The names only the newer header has, against it.
    if [ -s "$work/next_names.txt" ]; then
        {
            echo "/* generated by abi_check.sh */"
            comm -12 "$work/ours_consts.txt" "$work/next_obj_macros.txt" |
                comm -23 - "$work/mpich_obj_macros.txt" | sed 's/.*/    PROBE(&);/'
            comm -12 "$work/ours_enums.txt" "$work/next_names.txt" |
                comm -23 - "$work/mpich_names.txt" | sed 's/.*/    PROBE(&);/'
        } > "$work/probe_names.h"
        probe "$next_inc" "the newer MPICH" named
    fi

    # ---- 3. signatures -----------------------------------------------------
    # Each name's declaration from MPICH_INC's header, else the newer one's.
    decls_of() { # extractor, ours-file
        { "$1" < "$work/mpich_decls_all.txt" | sort -u -k1,1; } > "$work/d1.txt"
        { "$1" < "$work/next_decls_all.txt" | sort -u -k1,1; } > "$work/d2.txt"
        cut -f1 "$work/d1.txt" > "$work/d1_names.txt"
        join -t "$(printf '\t')" "$work/d2.txt" - < <(comm -23 "$2" "$work/d1_names.txt") > "$work/d2_only.txt" || true
        sort -u -k1,1 "$work/d1.txt" "$work/d2_only.txt" |
            join -t "$(printf '\t')" - "$2" | cut -f2- | sed 's/$/;/'
    }
    {
        echo "/* generated by abi_check.sh from MPICH's headers */"
        decls_of function_decls "$work/ours_funcs.txt"
        decls_of extern_decls "$work/ours_externs.txt"
        decls_of typedef_decls "$work/ours_typedefs.txt"
    } > "$work/mpich_decls.h"
    n_redecl="$(grep -c ';$' "$work/mpich_decls.h" || true)"
    n_ours="$(cat "$work/ours_funcs.txt" "$work/ours_externs.txt" "$work/ours_typedefs.txt" | wc -l)"
    if [ "$n_redecl" != "$n_ours" ]; then
        fail "found MPICH declarations for only $n_redecl of $n_ours gmpi declarations"
    fi
    compile "signatures match MPICH ($n_redecl functions/externs/typedefs re-declared)" \
        "$CC" -std=c11 -Wall -Werror -pedantic-errors -fsyntax-only \
        -I"$work" -I"$ours_inc" "$here/sig_check.c"
fi

echo
if [ "$failures" -ne 0 ]; then
    echo "abi_check: $failures check(s) FAILED"
    exit 1
fi
echo "abi_check: all checks passed"
