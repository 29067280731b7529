//! rsmpi (the `mpi` crate) on gmpi's libmpi.so.12: point-to-point around a ring,
//! broadcast, all-reduce, all-gather and a split communicator, with asserts.
//! Built and started by run.sh; every rank prints `OK rsmpi rank R` at the end.

use mpi::collective::SystemOperation;
use mpi::request::WaitGuard;
use mpi::topology::Color;
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().expect("MPI_Init failed or MPI was already initialized");
    let world = universe.world();
    let rank = world.rank();
    let size = world.size();
    assert!(size >= 1);

    // Send/receive around a ring (non-blocking send, blocking receive from anyone).
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let msg: Vec<i64> = (0..1000).map(|i| i64::from(rank) * 1_000_000 + i).collect();
    mpi::request::scope(|scope| {
        let _send = WaitGuard::from(world.process_at_rank(next).immediate_send(scope, &msg[..]));
        let (got, status) = world.any_process().receive_vec::<i64>();
        assert_eq!(status.source_rank(), prev, "ring: wrong source");
        assert_eq!(got.len(), 1000, "ring: wrong count");
        let want: Vec<i64> = (0..1000).map(|i| i64::from(prev) * 1_000_000 + i).collect();
        assert_eq!(got, want, "ring: wrong payload");
    });

    // A large tagged message, rank 0 -> last rank (rendezvous-sized).
    if size > 1 {
        let big: Vec<f64> = (0..(1 << 20)).map(|i| i as f64 * 0.5).collect();
        if rank == 0 {
            world.process_at_rank(size - 1).send_with_tag(&big[..], 42);
        } else if rank == size - 1 {
            let (got, status) = world.process_at_rank(0).receive_vec_with_tag::<f64>(42);
            assert_eq!(status.tag(), 42);
            assert_eq!(got, big, "big message: wrong payload");
        }
    }

    // Broadcast from the last rank.
    let root = world.process_at_rank(size - 1);
    let mut b = if rank == size - 1 { vec![2u32, 4, 8, 16, 32] } else { vec![0u32; 5] };
    root.broadcast_into(&mut b[..]);
    assert_eq!(b, [2, 4, 8, 16, 32], "broadcast");

    // All-reduce (sum) of integers and doubles.
    let mine = [rank, 1, 2 * rank];
    let mut sum = [0i32; 3];
    world.all_reduce_into(&mine[..], &mut sum[..], SystemOperation::sum());
    let ranks_sum = size * (size - 1) / 2;
    assert_eq!(sum, [ranks_sum, size, 2 * ranks_sum], "all_reduce sum (i32)");
    let x = f64::from(rank) + 0.25;
    let mut xs = 0.0f64;
    world.all_reduce_into(&x, &mut xs, SystemOperation::sum());
    assert!((xs - (f64::from(ranks_sum) + 0.25 * f64::from(size))).abs() < 1e-9, "all_reduce sum (f64)");
    let mut mx = 0i32;
    world.all_reduce_into(&rank, &mut mx, SystemOperation::max());
    assert_eq!(mx, size - 1, "all_reduce max");

    // All-gather.
    let mut all = vec![0i32; size as usize];
    world.all_gather_into(&rank, &mut all[..]);
    assert_eq!(all, (0..size).collect::<Vec<_>>(), "all_gather");

    // Split by parity, then all-reduce inside the half.
    let half = world
        .split_by_color(Color::with_value(rank % 2))
        .expect("split_by_color gave no communicator");
    let mut hsum = 0i32;
    half.all_reduce_into(&rank, &mut hsum, SystemOperation::sum());
    let want: i32 = (0..size).filter(|r| r % 2 == rank % 2).sum();
    assert_eq!(hsum, want, "all_reduce on the parity communicator");
    assert_eq!(half.rank(), rank / 2);

    world.barrier();
    println!("OK rsmpi rank {rank}");
}
