//! `gmpirun -np 4 ring [laps]`: a token travels around the ring `laps` times;
//! each rank adds one each time it passes. Rank 0 checks the total.

fn main() -> Result<(), gmpi::Error> {
    let universe = gmpi::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let laps: i64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let mut token = [0i64; 1];
    for lap in 0..laps {
        if rank == 0 {
            token[0] += 1;
            world.send(&token[..], next, 0)?;
            world.recv(&mut token[..], prev, 0)?;
        } else {
            world.recv(&mut token[..], prev, 0)?;
            token[0] += 1;
            world.send(&token[..], next, 0)?;
        }
        if rank == 0 && (lap + 1) % (laps / 4).max(1) == 0 {
            println!("lap {}: token = {}", lap + 1, token[0]);
        }
    }
    if rank == 0 {
        let want = laps * i64::from(size);
        if token[0] != want {
            eprintln!("ring: token is {}, expected {want}", token[0]);
            std::process::exit(1);
        }
        println!(
            "ring of {size} ranks: {laps} laps, token = {} (correct)",
            token[0]
        );
    }
    Ok(())
}
