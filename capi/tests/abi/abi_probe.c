/*
 * ABI probe: prints the layout of MPI_Status, the type and size of every
 * handle/scalar typedef, and the type and value of every constant listed in
 * the generated "probe_names.h".  abi_check.sh compiles this file once
 * against MPICH's mpi.h and once against gmpi's, and diffs the outputs.
 *
 * Needs C11 (_Generic).  Nothing is linked against an MPI library: the only
 * library symbol referenced, MPIR_Dup_fn (the target of MPI_DUP_FN), is
 * stubbed below, and MPI_UNWEIGHTED & co. are only used inside sizeof.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mpi.h>

/* Stub for the one function symbol the predefined constants refer to. */
int MPIR_Dup_fn(MPI_Comm oldcomm, int keyval, void *extra_state, void *attribute_val_in,
                void *attribute_val_out, int *flag)
{
    (void)oldcomm; (void)keyval; (void)extra_state;
    *(void **)attribute_val_out = attribute_val_in;
    *flag = 1;
    return 0;
}

/* Handle types are all 'int', so the copy/delete attribute callbacks of
 * communicators, datatypes and windows share one C type. */
typedef int (probe_copy_fn)(int, int, void *, void *, void *, int *);
typedef int (probe_delete_fn)(int, int, void *, void *);
typedef int (probe_datarep_fn)(void *, int, int, void *, MPI_Offset, void *);

#define TYPENAME(x) _Generic((x),                       \
    char: "char",                                       \
    signed char: "signed char",                         \
    unsigned char: "unsigned char",                     \
    short: "short",                                     \
    unsigned short: "unsigned short",                   \
    int: "int",                                         \
    unsigned int: "unsigned int",                       \
    long: "long",                                       \
    unsigned long: "unsigned long",                     \
    long long: "long long",                             \
    unsigned long long: "unsigned long long",           \
    float: "float",                                     \
    double: "double",                                   \
    void *: "void *",                                   \
    int *: "int *",                                     \
    char **: "char **",                                 \
    char ***: "char ***",                               \
    MPI_Status *: "MPI_Status *",                       \
    struct ADIOI_FileD *: "struct ADIOI_FileD *",       \
    probe_copy_fn *: "copy_attr_function *",            \
    probe_delete_fn *: "delete_attr_function *",        \
    probe_datarep_fn *: "datarep_conversion_function *", \
    default: "<other>")

static void show(const char *name, const char *type, intptr_t v)
{
    if (v == (intptr_t)&MPIR_Dup_fn)
        printf("const %-32s %-28s = &MPIR_Dup_fn\n", name, type);
    else
        printf("const %-32s %-28s = %lld (0x%llx)\n", name, type, (long long)v,
               (unsigned long long)v);
}

/* Object-like constant (integer, handle, pointer or function pointer). */
#define PROBE(x) show(#x, TYPENAME(x), (intptr_t)(x))
/* Function-like conversion macro (handle c2f/f2c): apply it to a handle. */
#define PROBE_CONV(f) show(#f "(7)", TYPENAME(f(7)), (intptr_t)(f(7)))
/* Data symbol: only its type can be checked without linking. */
#define PROBE_EXTERN(x) printf("extern %-31s size %zu\n", #x, sizeof(x))

#define TYPEDEF(t) printf("typedef %-30s %-28s size %zu align %zu\n", #t, \
                          TYPENAME((t)0), sizeof(t), _Alignof(t))

int main(void)
{
    /* Status layout */
    printf("status size %zu align %zu\n", sizeof(MPI_Status), _Alignof(MPI_Status));
    printf("status tag-size %zu\n", sizeof(struct MPI_Status));
    printf("status count_lo               off %zu size %zu\n",
           offsetof(MPI_Status, count_lo), sizeof(((MPI_Status *)0)->count_lo));
    printf("status count_hi_and_cancelled off %zu size %zu\n",
           offsetof(MPI_Status, count_hi_and_cancelled),
           sizeof(((MPI_Status *)0)->count_hi_and_cancelled));
    printf("status MPI_SOURCE             off %zu size %zu\n",
           offsetof(MPI_Status, MPI_SOURCE), sizeof(((MPI_Status *)0)->MPI_SOURCE));
    printf("status MPI_TAG                off %zu size %zu\n",
           offsetof(MPI_Status, MPI_TAG), sizeof(((MPI_Status *)0)->MPI_TAG));
    printf("status MPI_ERROR              off %zu size %zu\n",
           offsetof(MPI_Status, MPI_ERROR), sizeof(((MPI_Status *)0)->MPI_ERROR));

    /* Scalar and handle typedefs */
    TYPEDEF(MPI_Aint);
    TYPEDEF(MPI_Offset);
    TYPEDEF(MPI_Count);
    TYPEDEF(MPI_Fint);
    TYPEDEF(MPI_Comm);
    TYPEDEF(MPI_Group);
    TYPEDEF(MPI_Datatype);
    TYPEDEF(MPI_Op);
    TYPEDEF(MPI_Request);
    TYPEDEF(MPI_Errhandler);
    TYPEDEF(MPI_Info);
    TYPEDEF(MPI_Win);
    TYPEDEF(MPI_Message);
    TYPEDEF(MPI_Session);
    TYPEDEF(MPI_File);

    /* Generated: every constant gmpi's header defines. */
#include "probe_names.h"
    return 0;
}
