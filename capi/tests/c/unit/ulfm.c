/* The ULFM calls MPICH 4.x declares (MPIX_Comm_agree, _iagree, _shrink,
 * _ishrink, _failure_ack, _failure_get_acked, _get_failed, _ack_failed) in
 * a job where no process failed; and an agreement started while the other
 * ranks are in a barrier, which must not match that barrier. Any np. */
#define TEST_NAME "ulfm"
#include "../check.h"

/* Exported by gmpi (MPICH 4.2's names); MPICH 4.0's mpi.h does not declare
 * them. */
int MPIX_Comm_iagree(MPI_Comm comm, int *flag, MPI_Request *request);
int MPIX_Comm_ishrink(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request);
int MPIX_Comm_get_failed(MPI_Comm comm, MPI_Group *failedgrp);
int MPIX_Comm_ack_failed(MPI_Comm comm, int num_to_ack, int *num_acked);

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm comm, shrunk;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int flag = (rank % 2) ? 0x6 : 0x3;
    CHECK_MPI(MPIX_Comm_agree(comm, &flag));
    CHECK(flag == (size > 1 ? 0x2 : 0x3), "agree: %#x", flag);
    for (int root = 0; root < size; root++) {
        MPI_Request req;
        MPI_Barrier(comm);
        if (rank == root) {
            flag = 0xb;
            CHECK_MPI(MPIX_Comm_iagree(comm, &flag, &req));
            MPI_Barrier(comm);
        } else {
            flag = 0xd;
            MPI_Barrier(comm);
            CHECK_MPI(MPIX_Comm_iagree(comm, &flag, &req));
        }
        CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK(flag == (size > 1 ? 0x9 : 0xb), "iagree with root %d: %#x", root, flag);
    }
    CHECK_MPI(MPIX_Comm_shrink(comm, &shrunk));
    int ssize, cmp;
    MPI_Comm_size(shrunk, &ssize);
    MPI_Comm_compare(comm, shrunk, &cmp);
    CHECK(ssize == size && cmp == MPI_CONGRUENT, "shrink: size %d, compare %d", ssize, cmp);
    MPI_Comm_free(&shrunk);
    MPI_Request req;
    CHECK_MPI(MPIX_Comm_ishrink(comm, &shrunk, &req));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MPI_Comm_size(shrunk, &ssize);
    CHECK(ssize == size, "ishrink: size %d", ssize);
    MPI_Comm_free(&shrunk);
    MPI_Group g;
    int gs, acked = -1;
    CHECK_MPI(MPIX_Comm_failure_ack(comm));
    CHECK_MPI(MPIX_Comm_failure_get_acked(comm, &g));
    MPI_Group_size(g, &gs);
    CHECK(gs == 0, "no failed process acknowledged");
    if (g != MPI_GROUP_EMPTY)
        MPI_Group_free(&g);
    CHECK_MPI(MPIX_Comm_get_failed(comm, &g));
    MPI_Group_size(g, &gs);
    CHECK(gs == 0, "no failed process");
    if (g != MPI_GROUP_EMPTY)
        MPI_Group_free(&g);
    CHECK_MPI(MPIX_Comm_ack_failed(comm, size, &acked));
    CHECK(acked == 0, "ack_failed %d", acked);
    MPI_Comm_free(&comm);
    MPI_Barrier(MPI_COMM_WORLD);
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
