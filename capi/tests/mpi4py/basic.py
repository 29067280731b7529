"""mpi4py on gmpi's libmpi.so.12: a quick end-to-end check.

Run it on any number of ranks, with the environment that makes mpi4py load gmpi
(see run_suite.sh or capi/README-section.md):

    MPI4PY_LIBMPI=$PREFIX/lib/libmpi.so.12 LD_LIBRARY_PATH=$PREFIX/lib \\
        $PREFIX/bin/gmpirun -np 4 /opt/gmpi-py/bin/python capi/tests/mpi4py/basic.py

Covers numpy Send/Recv around a ring, bcast of a Python object, Bcast of a numpy
array, Allreduce (sum) of numpy arrays, and Comm.Split by parity followed by an
Allreduce on the new communicator. Every rank prints `OK mpi4py rank R` at the end.
"""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()

if rank == 0:
    print(f"mpi4py {__import__('mpi4py').__version__} on: "
          f"{MPI.Get_library_version().splitlines()[0].strip()} "
          f"(MPI {'.'.join(map(str, MPI.Get_version()))}, {size} ranks)", flush=True)

# numpy Send/Recv around a ring (Sendrecv-free: even ranks send first).
nxt, prv = (rank + 1) % size, (rank - 1) % size
out = np.arange(1000, dtype="f8") + 1000.0 * rank
inb = np.empty(1000, dtype="f8")
if size > 1:
    if rank % 2 == 0:
        comm.Send([out, MPI.DOUBLE], dest=nxt, tag=7)
        comm.Recv([inb, MPI.DOUBLE], source=prv, tag=7)
    else:
        st = MPI.Status()
        comm.Recv(inb, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
        assert st.Get_source() == prv and st.Get_tag() == 7, (st.Get_source(), st.Get_tag())
        assert st.Get_count(MPI.DOUBLE) == 1000
        comm.Send(out, dest=nxt, tag=7)
    assert np.array_equal(inb, np.arange(1000, dtype="f8") + 1000.0 * prv), "ring Send/Recv"

# A large message (rendezvous-sized), rank 0 -> last, non-blocking.
if size > 1:
    big = np.arange(1 << 20, dtype="i8")
    if rank == 0:
        comm.Isend(big, dest=size - 1, tag=11).Wait()
    elif rank == size - 1:
        got = np.empty_like(big)
        comm.Irecv(got, source=0, tag=11).Wait()
        assert np.array_equal(got, big), "large Isend/Irecv"

# Pickled point-to-point.
if size > 1:
    if rank == 0:
        comm.send({"hello": [1, 2, 3], "from": 0}, dest=1, tag=3)
    elif rank == 1:
        msg = comm.recv(source=0, tag=3)
        assert msg == {"hello": [1, 2, 3], "from": 0}, msg

# bcast of a Python object.
obj = {"answer": 42, "list": list(range(10)), "text": "gmpi"} if rank == 0 else None
obj = comm.bcast(obj, root=0)
assert obj == {"answer": 42, "list": list(range(10)), "text": "gmpi"}, obj

# Bcast of a numpy array from the last rank.
arr = np.linspace(0.0, 1.0, 4096) if rank == size - 1 else np.zeros(4096)
comm.Bcast(arr, root=size - 1)
assert np.array_equal(arr, np.linspace(0.0, 1.0, 4096)), "Bcast"

# Allreduce (sum) of numpy arrays, in both integer and floating point, and in place.
a = np.full(100, rank, dtype="i4")
s = np.empty_like(a)
comm.Allreduce(a, s, op=MPI.SUM)
assert (s == size * (size - 1) // 2).all(), "Allreduce int sum"
x = np.arange(10, dtype="f8") * (rank + 1)
y = np.zeros_like(x)
comm.Allreduce([x, MPI.DOUBLE], [y, MPI.DOUBLE], op=MPI.SUM)
assert np.allclose(y, np.arange(10) * size * (size + 1) / 2), "Allreduce double sum"
z = np.array([rank], dtype="i8")
comm.Allreduce(MPI.IN_PLACE, z, op=MPI.MAX)
assert z[0] == size - 1, "Allreduce IN_PLACE max"
assert comm.allreduce(rank, op=MPI.SUM) == size * (size - 1) // 2, "allreduce (pickled)"

# Split by parity, then Allreduce on the new communicator.
sub = comm.Split(color=rank % 2, key=rank)
assert sub.Get_rank() == rank // 2, (sub.Get_rank(), rank)
assert sub.Get_size() == (size + 1 - rank % 2) // 2, sub.Get_size()
r = np.array([rank], dtype="i4")
t = np.zeros(1, dtype="i4")
sub.Allreduce(r, t, op=MPI.SUM)
assert t[0] == sum(q for q in range(size) if q % 2 == rank % 2), ("split Allreduce", t[0])
sub.Free()

comm.Barrier()
print(f"OK mpi4py rank {rank}", flush=True)
