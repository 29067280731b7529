/* Cartesian topologies: Dims_create, Cart_create/get/rank/coords/shift/sub,
 * Topo_test, and a 2D periodic halo exchange with neighbour collectives
 * (contiguous rows and strided columns through MPI_Neighbor_alltoallw). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", wrank, __FILE__, __LINE__, #c); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
static int wrank;

static void dims_checks(void) {
    int d2[2] = {0, 0};
    MPI_Dims_create(6, 2, d2); CHECK(d2[0] == 3 && d2[1] == 2);
    int d3[3] = {0, 0, 0};
    MPI_Dims_create(16, 3, d3); CHECK(d3[0] == 4 && d3[1] == 2 && d3[2] == 2);
    int dp[3] = {0, 3, 0};
    MPI_Dims_create(12, 3, dp); CHECK(dp[0] == 2 && dp[1] == 3 && dp[2] == 2);
    int d7[2] = {0, 0};
    MPI_Dims_create(7, 2, d7); CHECK(d7[0] == 7 && d7[1] == 1);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    dims_checks();

    int t;
    MPI_Topo_test(MPI_COMM_WORLD, &t); CHECK(t == MPI_UNDEFINED);

    /* 2D periodic grid over every rank. */
    int dims[2] = {0, 0}, periods[2] = {1, 1};
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    CHECK(cart != MPI_COMM_NULL);
    MPI_Topo_test(cart, &t); CHECK(t == MPI_CART);
    int nd; MPI_Cartdim_get(cart, &nd); CHECK(nd == 2);
    int gd[2], gp[2], gc[2], rank;
    MPI_Comm_rank(cart, &rank); CHECK(rank == wrank);
    MPI_Cart_get(cart, 2, gd, gp, gc);
    CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 1);
    CHECK(gc[0] == rank / dims[1] && gc[1] == rank % dims[1]);
    int r2; MPI_Cart_rank(cart, gc, &r2); CHECK(r2 == rank);
    int wrap[2] = {gc[0] + dims[0], gc[1] - dims[1]};
    MPI_Cart_rank(cart, wrap, &r2); CHECK(r2 == rank);
    for (int r = 0; r < size; r++) {
        int c[2]; MPI_Cart_coords(cart, r, 2, c);
        CHECK(c[0] == r / dims[1] && c[1] == r % dims[1]);
    }
    int up, down, left, right;
    MPI_Cart_shift(cart, 0, 1, &up, &down);
    MPI_Cart_shift(cart, 1, 1, &left, &right);
    CHECK(up == ((gc[0] - 1 + dims[0]) % dims[0]) * dims[1] + gc[1]);
    CHECK(down == ((gc[0] + 1) % dims[0]) * dims[1] + gc[1]);
    CHECK(left == gc[0] * dims[1] + (gc[1] - 1 + dims[1]) % dims[1]);
    CHECK(right == gc[0] * dims[1] + (gc[1] + 1) % dims[1]);

    /* Halo exchange: local N x N interior with a 1-cell halo, (N+2)^2 ints. */
    enum { N = 4, W = N + 2 };
    int grid[W * W];
    for (int i = 0; i < W * W; i++) grid[i] = -1;
    for (int i = 1; i <= N; i++)
        for (int j = 1; j <= N; j++) grid[i * W + j] = rank * 1000 + i * 10 + j;
    MPI_Datatype col;
    MPI_Type_vector(N, 1, W, MPI_INT, &col);
    MPI_Type_commit(&col);
    /* Neighbour order: dim 0 -1 (up), dim 0 +1 (down), dim 1 -1 (left), dim 1 +1 (right). */
    int ones[4] = {1, 1, 1, 1};
    MPI_Datatype rowt;
    MPI_Type_vector(1, N, N, MPI_INT, &rowt);
    MPI_Type_commit(&rowt);
    MPI_Datatype types[4] = {rowt, rowt, col, col};
    MPI_Aint sd[4] = {(1 * W + 1) * 4, (N * W + 1) * 4, (1 * W + 1) * 4, (1 * W + N) * 4};
    MPI_Aint rd[4] = {(0 * W + 1) * 4, ((N + 1) * W + 1) * 4, (1 * W + 0) * 4, (1 * W + N + 1) * 4};
    /* The halo is received into the same array it is sent from (different
     * cells), so send from a copy. */
    int copy[W * W];
    memcpy(copy, grid, sizeof grid);
    MPI_Neighbor_alltoallw(copy, ones, sd, types, grid, ones, rd, types, cart);
    for (int j = 1; j <= N; j++) {
        CHECK(grid[0 * W + j] == up * 1000 + N * 10 + j);          /* up's last row */
        CHECK(grid[(N + 1) * W + j] == down * 1000 + 1 * 10 + j);  /* down's first row */
    }
    for (int i = 1; i <= N; i++) {
        CHECK(grid[i * W + 0] == left * 1000 + i * 10 + N);        /* left's last column */
        CHECK(grid[i * W + N + 1] == right * 1000 + i * 10 + 1);   /* right's first column */
    }

    /* The same exchange, non-blocking, into a cleared halo. */
    for (int k = 0; k < W; k++) grid[k] = grid[(W - 1) * W + k] = grid[k * W] = grid[k * W + W - 1] = -1;
    MPI_Request hreq;
    MPI_Ineighbor_alltoallw(copy, ones, sd, types, grid, ones, rd, types, cart, &hreq);
    MPI_Status hst;
    MPI_Wait(&hreq, &hst);
    for (int j = 1; j <= N; j++)
        CHECK(grid[0 * W + j] == up * 1000 + N * 10 + j && grid[(N + 1) * W + j] == down * 1000 + 1 * 10 + j);
    for (int i = 1; i <= N; i++)
        CHECK(grid[i * W + 0] == left * 1000 + i * 10 + N && grid[i * W + N + 1] == right * 1000 + i * 10 + 1);

    /* Neighbor_alltoall and allgather: ranks of the neighbours. */
    int sb[4], rb[4];
    for (int k = 0; k < 4; k++) sb[k] = rank * 10 + k;
    MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, cart);
    /* What my up neighbour sent to its +1 (block 1) arrives in my block 0. */
    CHECK(rb[0] == up * 10 + 1 && rb[1] == down * 10 + 0 && rb[2] == left * 10 + 3 && rb[3] == right * 10 + 2);
    int me = rank, all[4];
    MPI_Neighbor_allgather(&me, 1, MPI_INT, all, 1, MPI_INT, cart);
    CHECK(all[0] == up && all[1] == down && all[2] == left && all[3] == right);
    MPI_Request req;
    memset(rb, 0, sizeof rb);
    MPI_Ineighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, cart, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK(req == MPI_REQUEST_NULL);
    CHECK(rb[0] == up * 10 + 1 && rb[1] == down * 10 + 0 && rb[2] == left * 10 + 3 && rb[3] == right * 10 + 2);

    /* Cart_sub: rows (keep dim 1) and columns (keep dim 0). */
    int keep_row[2] = {0, 1}, keep_col[2] = {1, 0};
    MPI_Comm row, colc;
    MPI_Cart_sub(cart, keep_row, &row);
    MPI_Cart_sub(cart, keep_col, &colc);
    int rs, rr, cs, cr;
    MPI_Comm_size(row, &rs); MPI_Comm_rank(row, &rr);
    MPI_Comm_size(colc, &cs); MPI_Comm_rank(colc, &cr);
    CHECK(rs == dims[1] && rr == gc[1] && cs == dims[0] && cr == gc[0]);
    MPI_Cartdim_get(row, &nd); CHECK(nd == 1);
    int sdm, spr, scd;
    MPI_Cart_get(row, 1, &sdm, &spr, &scd); CHECK(sdm == dims[1] && spr == 1 && scd == gc[1]);
    int rl, rrt; MPI_Cart_shift(row, 0, 1, &rl, &rrt);
    CHECK(rl == (gc[1] - 1 + dims[1]) % dims[1] && rrt == (gc[1] + 1) % dims[1]);
    /* A 1D neighbour collective on the sub-communicator. */
    int v2[2];
    MPI_Neighbor_allgather(&rr, 1, MPI_INT, v2, 1, MPI_INT, row);
    CHECK(v2[0] == rl && v2[1] == rrt);
    MPI_Comm_free(&row);
    MPI_Comm_free(&colc);

    /* Non-periodic 1D grid over size-1 ranks: the last rank gets MPI_COMM_NULL. */
    if (size > 1) {
        int n1 = size - 1, p0 = 0;
        MPI_Comm line;
        MPI_Cart_create(MPI_COMM_WORLD, 1, &n1, &p0, 1, &line);
        if (wrank == size - 1) {
            CHECK(line == MPI_COMM_NULL);
        } else {
            CHECK(line != MPI_COMM_NULL);
            int s, d;
            MPI_Cart_shift(line, 0, 1, &s, &d);
            CHECK(s == (wrank == 0 ? MPI_PROC_NULL : wrank - 1));
            CHECK(d == (wrank == n1 - 1 ? MPI_PROC_NULL : wrank + 1));
            int x[2] = {-5, -5};
            MPI_Neighbor_allgather(&wrank, 1, MPI_INT, x, 1, MPI_INT, line);
            CHECK(x[0] == (s == MPI_PROC_NULL ? -5 : s) && x[1] == (d == MPI_PROC_NULL ? -5 : d));
            int nr; MPI_Cart_map(MPI_COMM_WORLD, 1, &n1, &p0, &nr); CHECK(nr == wrank);
            MPI_Comm_free(&line);
        }
    }
    /* Size-1 periodic dimension: a process is its own -1 and +1 neighbour. */
    {
        int one = 1, per = 1;
        MPI_Comm self1;
        MPI_Cart_create(MPI_COMM_SELF, 1, &one, &per, 0, &self1);
        int s2[2] = {100, 200}, r2b[2] = {0, 0};
        MPI_Neighbor_alltoall(s2, 1, MPI_INT, r2b, 1, MPI_INT, self1);
        CHECK(r2b[0] == 200 && r2b[1] == 100);
        MPI_Comm_free(&self1);
    }
    MPI_Comm_free(&cart);
    MPI_Barrier(MPI_COMM_WORLD);
    if (wrank == 0) printf("OK\n");
    MPI_Finalize();
    return 0;
}
