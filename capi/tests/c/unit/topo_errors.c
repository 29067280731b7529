/* Argument checking of the topology calls, with MPI_ERRORS_RETURN. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int wrank, fails;
#define EXPECT(call, cls) do { int rc_ = (call), c_ = -1; MPI_Error_class(rc_, &c_); \
    if (c_ != (cls)) { fprintf(stderr, "rank %d: line %d: %s returned class %d, expected %s (%d)\n", wrank, __LINE__, #call, c_, #cls, cls); fails++; } } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int d2[2] = {0, 0}, neg[2] = {-1, 0}, fix[2] = {4, 0};
    EXPECT(MPI_Dims_create(6, -1, d2), MPI_ERR_DIMS);
    EXPECT(MPI_Dims_create(6, 2, neg), MPI_ERR_DIMS);
    EXPECT(MPI_Dims_create(6, 2, fix), MPI_ERR_DIMS);
    EXPECT(MPI_Dims_create(6, 2, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Dims_create(6, 2, d2), MPI_SUCCESS);
    d2[0] = d2[1] = 0;
    EXPECT(MPI_Dims_create(size, 2, d2), MPI_SUCCESS);

    MPI_Comm c = MPI_COMM_NULL;
    int big[2] = {size + 1, 1}, zero[2] = {0, 1}, per[2] = {0, 0};
    EXPECT(MPI_Cart_create(MPI_COMM_WORLD, 2, big, per, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Cart_create(MPI_COMM_WORLD, 2, zero, per, 0, &c), MPI_ERR_DIMS);
    EXPECT(MPI_Cart_create(MPI_COMM_WORLD, -1, zero, per, 0, &c), MPI_ERR_DIMS);
    EXPECT(MPI_Cart_create(MPI_COMM_NULL, 2, d2, per, 0, &c), MPI_ERR_COMM);
    EXPECT(MPI_Cart_create(MPI_COMM_WORLD, 2, d2, per, 0, NULL), MPI_ERR_ARG);
    int nr;
    EXPECT(MPI_Cart_map(MPI_COMM_WORLD, 2, big, per, &nr), MPI_ERR_DIMS);

    /* Calls that need a topology, on a communicator without one. */
    int nd, co[2], r, s, t;
    EXPECT(MPI_Cartdim_get(MPI_COMM_WORLD, &nd), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Cart_coords(MPI_COMM_WORLD, 0, 2, co), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Cart_shift(MPI_COMM_WORLD, 0, 1, &s, &t), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Graphdims_get(MPI_COMM_WORLD, &s, &t), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Dist_graph_neighbors_count(MPI_COMM_WORLD, &s, &t, &r), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Neighbor_allgather(&r, 1, MPI_INT, co, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Topo_test(MPI_COMM_NULL, &t), MPI_ERR_COMM);

    int p1[2] = {1, 0};
    EXPECT(MPI_Cart_create(MPI_COMM_WORLD, 2, d2, p1, 0, &c), MPI_SUCCESS);
    /* c inherits MPI_ERRORS_RETURN */
    EXPECT(MPI_Cart_coords(c, size, 2, co), MPI_ERR_RANK);
    EXPECT(MPI_Cart_coords(c, 0, 1, co), MPI_ERR_ARG);
    int bad[2] = {0, d2[1]};
    EXPECT(MPI_Cart_rank(c, bad, &r), MPI_ERR_RANK);   /* dim 1 not periodic */
    int okwrap[2] = {-1, 0};
    EXPECT(MPI_Cart_rank(c, okwrap, &r), MPI_SUCCESS);  /* dim 0 periodic */
    if (r != (d2[0] - 1) * d2[1]) { fprintf(stderr, "wrap gave %d\n", r); fails++; }
    EXPECT(MPI_Cart_shift(c, 2, 1, &s, &t), MPI_ERR_ARG);
    EXPECT(MPI_Cart_shift(c, -1, 1, &s, &t), MPI_ERR_ARG);
    EXPECT(MPI_Cart_shift(c, 0, 1, NULL, &t), MPI_ERR_ARG);
    EXPECT(MPI_Cart_get(c, 1, co, co, co), MPI_ERR_ARG);
    EXPECT(MPI_Graph_neighbors_count(c, 0, &s), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Dist_graph_neighbors(c, 4, co, co, 4, co, co), MPI_ERR_TOPOLOGY);
    int sb[4] = {0}, rb[4];
    EXPECT(MPI_Neighbor_alltoall(sb, -1, MPI_INT, rb, 1, MPI_INT, c), MPI_ERR_COUNT);
    EXPECT(MPI_Neighbor_alltoall(sb, 1, MPI_DATATYPE_NULL, rb, 1, MPI_INT, c), MPI_ERR_TYPE);
    EXPECT(MPI_Neighbor_alltoall(MPI_IN_PLACE, 1, MPI_INT, rb, 1, MPI_INT, c), MPI_ERR_BUFFER);
    EXPECT(MPI_Ineighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, c, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, c), MPI_SUCCESS);
    MPI_Comm_free(&c);

    /* Graphs */
    int idx[2] = {1, 0}, ed[1] = {0};
    EXPECT(MPI_Graph_create(MPI_COMM_WORLD, size + 1, idx, ed, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Graph_create(MPI_COMM_WORLD, -1, idx, ed, 0, &c), MPI_ERR_ARG);
    if (size >= 2) EXPECT(MPI_Graph_create(MPI_COMM_WORLD, 2, idx, ed, 0, &c), MPI_ERR_ARG); /* not cumulative */
    int idx1[1] = {1}, ed1[1] = {5};
    EXPECT(MPI_Graph_create(MPI_COMM_WORLD, 1, idx1, ed1, 0, &c), MPI_ERR_ARG);       /* edge out of range */
    int ed0[1] = {0};
    EXPECT(MPI_Graph_create(MPI_COMM_WORLD, 1, idx1, ed0, 0, &c), MPI_SUCCESS);
    if (wrank == 0) {
        EXPECT(MPI_Graph_neighbors_count(c, 1, &s), MPI_ERR_RANK);
        EXPECT(MPI_Graph_neighbors(c, 0, 0, co), MPI_ERR_ARG);
        EXPECT(MPI_Cart_shift(c, 0, 1, &s, &t), MPI_ERR_TOPOLOGY);
        MPI_Comm_free(&c);
    } else if (c != MPI_COMM_NULL) { fprintf(stderr, "rank %d got a graph comm\n", wrank); fails++; }

    /* Dist graphs */
    int one = 1, w = -3, who = (wrank + 1) % size, badr = size;
    EXPECT(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &badr, MPI_UNWEIGHTED, 0, NULL, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &c), MPI_ERR_RANK);
    EXPECT(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &who, &w, 1, &who, &one, MPI_INFO_NULL, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &who, MPI_UNWEIGHTED, 1, &who, &one, MPI_INFO_NULL, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, -1, &who, MPI_UNWEIGHTED, 0, NULL, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &who, MPI_WEIGHTS_EMPTY, 0, NULL, MPI_WEIGHTS_EMPTY, MPI_INFO_NULL, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 0, NULL, MPI_UNWEIGHTED, 0, NULL, MPI_UNWEIGHTED, 0x1c000123, 0, &c), MPI_ERR_INFO);
    int negdeg = -1;
    EXPECT(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &who, &negdeg, &who, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &c), MPI_ERR_ARG);
    EXPECT(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &who, &one, &who, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &c), MPI_SUCCESS);
    int in, out, wt, srcs[4];
    EXPECT(MPI_Dist_graph_neighbors_count(c, &in, &out, &wt), MPI_SUCCESS);
    if (in != 1 || out != 1 || wt != 0) { fprintf(stderr, "rank %d: counts %d %d %d\n", wrank, in, out, wt); fails++; }
    EXPECT(MPI_Dist_graph_neighbors(c, 0, srcs, MPI_UNWEIGHTED, 1, srcs, MPI_UNWEIGHTED), MPI_ERR_ARG);
    EXPECT(MPI_Cart_coords(c, 0, 2, co), MPI_ERR_TOPOLOGY);
    EXPECT(MPI_Graph_get(c, 1, 1, co, co), MPI_ERR_TOPOLOGY);
    MPI_Comm_free(&c);

    if (fails == 0 && wrank == 0) printf("OK\n");
    MPI_Finalize();
    return fails != 0;
}
