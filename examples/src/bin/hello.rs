//! `gmpirun -np 4 hello`: every rank says hello; rank 0 collects a greeting
//! from each of the others to show the ranks really talk.

fn main() -> Result<(), gmpi::Error> {
    let universe = gmpi::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let (lr, ls) = universe.local_rank_and_size();
    println!(
        "hello from rank {rank} of {size} on {} (local rank {lr} of {ls})",
        universe.processor_name()
    );
    if rank == 0 {
        for _ in 1..size {
            let mut who = [0i32; 1];
            let st = world.recv(&mut who[..], gmpi::ANY_SOURCE, 1)?;
            assert_eq!(who[0], st.source());
        }
        println!("rank 0 heard from all {} other ranks", size - 1);
    } else {
        world.send(&[rank][..], 0, 1)?;
    }
    world.barrier()?;
    Ok(())
}
