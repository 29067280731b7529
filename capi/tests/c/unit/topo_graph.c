/* Graph and distributed-graph topologies: Graph_create/get/neighbors,
 * Dist_graph_create_adjacent and Dist_graph_create (ring, weighted),
 * neighbour collectives over them, the non-blocking forms, and neighbour
 * collectives interleaved with user point-to-point on the same
 * communicator and tag. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", wrank, __FILE__, __LINE__, #c); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
static int wrank;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, t;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (wrank - 1 + size) % size, right = (wrank + 1) % size;

    /* ---- Graph: a ring (each node: left then right) ---- */
    int *index = malloc(size * sizeof(int)), *edges = malloc(2 * size * sizeof(int));
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i - 1 + size) % size;
        edges[2 * i + 1] = (i + 1) % size;
    }
    MPI_Comm g;
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g);
    MPI_Topo_test(g, &t); CHECK(t == MPI_GRAPH);
    int nn, ne; MPI_Graphdims_get(g, &nn, &ne); CHECK(nn == size && ne == 2 * size);
    int *gi = malloc(size * sizeof(int)), *ge = malloc(2 * size * sizeof(int));
    MPI_Graph_get(g, size, 2 * size, gi, ge);
    CHECK(memcmp(gi, index, size * sizeof(int)) == 0 && memcmp(ge, edges, 2 * size * sizeof(int)) == 0);
    int cnt; MPI_Graph_neighbors_count(g, wrank, &cnt); CHECK(cnt == 2);
    int nb[2]; MPI_Graph_neighbors(g, wrank, 2, nb); CHECK(nb[0] == left && nb[1] == right);
    int got[2];
    MPI_Neighbor_allgather(&wrank, 1, MPI_INT, got, 1, MPI_INT, g);
    CHECK(got[0] == left && got[1] == right);
    /* allgatherv with gaps */
    int gv[5] = {-1, -1, -1, -1, -1}, rc[2] = {1, 1}, dsp[2] = {3, 0};
    MPI_Neighbor_allgatherv(&wrank, 1, MPI_INT, gv, rc, dsp, MPI_INT, g);
    CHECK(gv[3] == left && gv[0] == right && gv[1] == -1);
    int nr; MPI_Graph_map(MPI_COMM_WORLD, size, index, edges, &nr); CHECK(nr == wrank);

    /* ---- Dist graph, adjacent: ring, in from left, out to right, weighted ---- */
    MPI_Comm dg;
    int sw = 7, dw = 9;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &left, &sw, 1, &right, &dw, MPI_INFO_NULL, 0, &dg);
    MPI_Topo_test(dg, &t); CHECK(t == MPI_DIST_GRAPH);
    int in, out, w;
    MPI_Dist_graph_neighbors_count(dg, &in, &out, &w); CHECK(in == 1 && out == 1 && w == 1);
    int s, sww, d, dww;
    MPI_Dist_graph_neighbors(dg, 1, &s, &sww, 1, &d, &dww);
    CHECK(s == left && sww == 7 && d == right && dww == 9);
    int x = wrank * 3, y = -1;
    MPI_Neighbor_alltoall(&x, 1, MPI_INT, &y, 1, MPI_INT, dg);
    CHECK(y == left * 3);

    /* Unweighted adjacent: both directions of the ring. */
    MPI_Comm dgu;
    int srcs[2] = {left, right}, dsts[2] = {left, right};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, srcs, MPI_UNWEIGHTED, 2, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &dgu);
    MPI_Dist_graph_neighbors_count(dgu, &in, &out, &w); CHECK(in == 2 && out == 2 && w == 0);
    int sb[2] = {wrank * 10 + 0, wrank * 10 + 1}, rb[2];
    MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, dgu);
    /* From left: what it sent to its destination #1 (its right = me). */
    if (size > 2) CHECK(rb[0] == left * 10 + 1 && rb[1] == right * 10 + 0);
    /* alltoallv with 2 ints each, reversed displacements */
    int sv[4] = {wrank, wrank + 100, wrank + 200, wrank + 300}, rv[4] = {0}, c2[2] = {2, 2}, sdp[2] = {0, 2}, rdp[2] = {2, 0};
    MPI_Neighbor_alltoallv(sv, c2, sdp, MPI_INT, rv, c2, rdp, MPI_INT, dgu);
    if (size > 2) CHECK(rv[2] == left + 200 && rv[3] == left + 300 && rv[0] == right && rv[1] == right + 100);

    /* ---- Dist graph, general: rank r declares the edge (r+1) -> (r+2)
     * (weight r), so every process learns its edges from another. ---- */
    MPI_Comm dgg;
    int src = (wrank + 1) % size, deg = 1, dst = (wrank + 2) % size, wt = wrank;
    MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &src, &deg, &dst, &wt, MPI_INFO_NULL, 0, &dgg);
    MPI_Dist_graph_neighbors_count(dgg, &in, &out, &w); CHECK(in == 1 && out == 1 && w == 1);
    MPI_Dist_graph_neighbors(dgg, 1, &s, &sww, 1, &d, &dww);
    CHECK(s == left && d == right);
    CHECK(sww == (wrank - 2 + 2 * size) % size && dww == (wrank - 1 + size) % size);
    x = wrank + 1000; y = -1;
    MPI_Neighbor_alltoall(&x, 1, MPI_INT, &y, 1, MPI_INT, dgg);
    CHECK(y == left + 1000);
    /* MPI_WEIGHTS_EMPTY on a process with no edges; unweighted query ignored */
    MPI_Dist_graph_neighbors(dgg, 1, &s, MPI_UNWEIGHTED, 1, &d, MPI_UNWEIGHTED);
    MPI_Comm dge;
    MPI_Dist_graph_create(MPI_COMM_WORLD, 0, NULL, NULL, NULL, MPI_WEIGHTS_EMPTY, MPI_INFO_NULL, 0, &dge);
    MPI_Dist_graph_neighbors_count(dge, &in, &out, &w); CHECK(in == 0 && out == 0 && w == 1);
    MPI_Neighbor_alltoall(&x, 1, MPI_INT, &y, 1, MPI_INT, dge);
    MPI_Comm_free(&dge);

    /* ---- Non-blocking, and interference with user point-to-point ---- */
    int ub = -1, tag = 1;
    MPI_Request ureq, nreq[3];
    MPI_Irecv(&ub, 1, MPI_INT, left, tag, dg, &ureq);
    int y1 = -1, y2 = -1, y3[2] = {-1, -1};
    int x1 = wrank * 3 + 1, x2 = wrank * 3 + 2;
    MPI_Ineighbor_alltoall(&x1, 1, MPI_INT, &y1, 1, MPI_INT, dg, &nreq[0]);
    MPI_Send(&wrank, 1, MPI_INT, right, tag, dg);
    MPI_Ineighbor_alltoall(&x2, 1, MPI_INT, &y2, 1, MPI_INT, dg, &nreq[1]);
    MPI_Ineighbor_allgather(&wrank, 1, MPI_INT, y3, 1, MPI_INT, g, &nreq[2]);
    int flag = 0;
    MPI_Status sts[3];
    while (!flag) MPI_Testall(3, nreq, &flag, sts);
    MPI_Wait(&ureq, MPI_STATUS_IGNORE);
    CHECK(ub == left && y1 == left * 3 + 1 && y2 == left * 3 + 2 && y3[0] == left && y3[1] == right);
    /* Waitany / Waitsome over neighbour requests */
    MPI_Ineighbor_alltoall(&x1, 1, MPI_INT, &y1, 1, MPI_INT, dg, &nreq[0]);
    MPI_Ineighbor_alltoallv(sv, c2, sdp, MPI_INT, rv, c2, rdp, MPI_INT, dgu, &nreq[1]);
    int idx, done = 0;
    while (done < 2) { MPI_Waitany(2, nreq, &idx, MPI_STATUS_IGNORE); done++; }
    CHECK(nreq[0] == MPI_REQUEST_NULL && nreq[1] == MPI_REQUEST_NULL);
    MPI_Datatype ts[2] = {MPI_INT, MPI_INT};
    int one[2] = {1, 1};
    MPI_Aint bd[2] = {0, sizeof(int)};
    int wr[2] = {-1, -1};
    MPI_Ineighbor_alltoallw(sb, one, bd, ts, wr, one, bd, ts, dgu, &nreq[0]);
    MPI_Wait(&nreq[0], MPI_STATUS_IGNORE);
    if (size > 2) CHECK(wr[0] == left * 10 + 1 && wr[1] == right * 10 + 0);
    int ag[2] = {0, 0}, rcs[2] = {1, 1}, dis[2] = {1, 0};
    MPI_Ineighbor_allgatherv(&wrank, 1, MPI_INT, ag, rcs, dis, MPI_INT, dgu, &nreq[0]);
    MPI_Wait(&nreq[0], MPI_STATUS_IGNORE);
    CHECK(ag[1] == left && ag[0] == right);

    MPI_Comm_free(&g);
    MPI_Comm_free(&dg);
    MPI_Comm_free(&dgu);
    MPI_Comm_free(&dgg);
    free(index); free(edges); free(gi); free(ge);
    MPI_Barrier(MPI_COMM_WORLD);
    if (wrank == 0) printf("OK\n");
    MPI_Finalize();
    return 0;
}
