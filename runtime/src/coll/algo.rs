//! Collective algorithms as schedule builders. Each takes the communicator
//! size `n`, this rank `me` and regions of the schedule, and appends the
//! point-to-point steps and local reductions of one algorithm.
//!
//! Reductions keep MPI's operand order (`lower ∘ higher`) wherever the
//! algorithm allows it, and every element of an allreduce result is computed
//! once, or identically on both partners, so every rank gets the same bits.

use super::sched::{Region, Sched};

/// Rank `rel` places after `root` (relative numbering of rooted trees).
fn abs(rel: i32, root: i32, n: i32) -> i32 {
    (rel + root) % n
}

/// Dissemination barrier: ⌈log₂ n⌉ rounds of empty messages.
pub fn barrier(s: &mut Sched, n: i32, me: i32) {
    let empty = s.temp(0);
    let mut dist = 1;
    while dist < n {
        s.recv(empty, (me - dist).rem_euclid(n));
        s.send(empty, (me + dist) % n);
        s.wait();
        dist *= 2;
    }
}

/// Binomial-tree broadcast of `buf` from `root`.
pub fn bcast_binomial(s: &mut Sched, n: i32, me: i32, root: i32, buf: Region) {
    let rel = (me - root).rem_euclid(n);
    let mut mask = 1;
    while mask < n {
        if rel & mask != 0 {
            s.recv(buf, abs(rel - mask, root, n));
            s.wait();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < n {
            s.send(buf, abs(rel + mask, root, n));
        }
        mask >>= 1;
    }
    s.wait();
}

/// Byte range of chunk `j` of `len` bytes cut into chunks of `ss`.
fn chunk(buf: Region, ss: usize, j: i32, span: i32) -> Region {
    let lo = (j as usize * ss).min(buf.len);
    let hi = ((j + span) as usize * ss).min(buf.len);
    buf.sub(lo, hi - lo)
}

/// Large broadcast (van de Geijn): binomial scatter of `n` chunks, then a
/// ring allgather of the chunks.
pub fn bcast_scatter_allgather(s: &mut Sched, n: i32, me: i32, root: i32, buf: Region) {
    let ss = buf.len.div_ceil(n as usize);
    let rel = (me - root).rem_euclid(n);
    let top = (n as u32).next_power_of_two() as i32;
    let span = |r: i32| if r == 0 { top } else { r & -r };
    // Scatter: rank `rel` receives chunks [rel, rel + span(rel)) from its parent.
    let mut mask = 1;
    while mask < n {
        if rel & mask != 0 {
            let r = chunk(buf, ss, rel, span(rel));
            if r.len > 0 {
                s.recv(r, abs(rel - mask, root, n));
                s.wait();
            }
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < n {
            let c = rel + mask;
            let r = chunk(buf, ss, c, span(c));
            if r.len > 0 {
                s.send(r, abs(c, root, n));
            }
        }
        mask >>= 1;
    }
    s.wait();
    // Ring allgather of the chunks: rank r holds chunk (r − root) mod n.
    let blocks: Vec<Region> = (0..n)
        .map(|r| chunk(buf, ss, (r - root).rem_euclid(n), 1))
        .collect();
    allgather_ring(s, n, me, &blocks);
}

/// Binomial reduce to `root`. `input` holds this rank's contribution:
/// `acc` itself, or a separate region, in which case `acc` is written by the
/// algorithm (it must be writable unless this rank is a leaf); `tmp` is
/// scratch of the same size. Returns the region holding the result at the
/// root (meaningless elsewhere). Non-commutative ops reduce in rank order
/// along a tree rooted at rank 0, which then sends the result to `root`.
///
/// A separate `input` is never copied: a leaf sends it as it is, and the
/// first child's partial result is reduced with it straight into `acc`
/// (commutative: the child's lands in `acc` and `input` is reduced into it)
/// or into `tmp` (rank order: `input ∘ child`).
#[allow(clippy::too_many_arguments)]
pub fn reduce_binomial(
    s: &mut Sched,
    n: i32,
    me: i32,
    root: i32,
    input: Region,
    acc: Region,
    tmp: Region,
    commutative: bool,
) -> Region {
    let tree_root = if commutative { root } else { 0 };
    let rel = (me - tree_root).rem_euclid(n);
    let (mut cur, mut other) = (acc, tmp);
    // The contribution while it is not in `cur` yet.
    let mut fresh = (input != acc).then_some(input);
    let mut mask = 1;
    while mask < n {
        if rel & mask == 0 {
            let child = rel | mask;
            if child < n {
                let from = abs(child, tree_root, n);
                match fresh.take() {
                    Some(i) if commutative => {
                        s.recv(cur, from);
                        s.wait();
                        s.reduce(i, cur);
                    }
                    Some(i) => {
                        s.recv(other, from);
                        s.wait();
                        s.reduce(i, other);
                        std::mem::swap(&mut cur, &mut other);
                    }
                    None => {
                        s.recv(other, from);
                        s.wait();
                        // cur covers lower ranks than the child's partial result.
                        if commutative {
                            s.reduce(other, cur);
                        } else {
                            s.reduce(cur, other);
                            std::mem::swap(&mut cur, &mut other);
                        }
                    }
                }
            }
        } else {
            s.send(fresh.unwrap_or(cur), abs(rel & !mask, tree_root, n));
            s.wait();
            break;
        }
        mask <<= 1;
    }
    if tree_root != root {
        if me == tree_root {
            s.send(fresh.unwrap_or(cur), root);
            s.wait();
        } else if me == root {
            s.recv(other, tree_root);
            s.wait();
            cur = other;
        }
    }
    cur
}

/// Recursive-doubling allreduce, correct for any `n` (the first
/// `2 × (n − 2^⌊log₂n⌋)` ranks fold pairwise first). `input` holds this
/// rank's contribution: `acc` itself (in place) or a separate region, in
/// which case `acc` is filled by the algorithm; `tmp` is scratch. Returns
/// the region holding the result (the same bits on every rank).
///
/// A separate `input` is what this rank sends first, and it is copied into
/// `acc` only where it must be reduced into: the lower partner of the first
/// exchange has the other's contribution land in `acc` and reduces its own
/// into it (`input ∘ acc`, the rank order), with no copy at all. Sending a
/// freshly written copy instead would make the partner pull every line out
/// of this core's cache, which costs more than the copy itself.
pub fn allreduce_recursive_doubling(
    s: &mut Sched,
    n: i32,
    me: i32,
    input: Region,
    acc: Region,
    tmp: Region,
) -> Region {
    let p2 = 1 << (31 - (n as u32).leading_zeros());
    let rem = n - p2;
    let (mut cur, mut other) = (acc, tmp);
    // The contribution while it is not in `acc` yet.
    let mut fresh = (input != acc).then_some(input);
    let newrank = if me < 2 * rem {
        if me % 2 == 0 {
            // `acc` is written only by the result coming back.
            s.send(fresh.unwrap_or(cur), me + 1);
            s.wait();
            -1
        } else {
            s.recv(other, me - 1);
            s.wait();
            if let Some(i) = fresh.take() {
                s.copy(i, cur);
            }
            s.reduce(other, cur);
            me / 2
        }
    } else {
        me - rem
    };
    if newrank >= 0 {
        let real = |nr: i32| if nr < rem { nr * 2 + 1 } else { nr + rem };
        let mut mask = 1;
        while mask < p2 {
            let pn = newrank ^ mask;
            let peer = real(pn);
            match fresh.take() {
                Some(i) if pn > newrank => {
                    s.recv(cur, peer);
                    s.send(i, peer);
                    s.wait();
                    s.reduce(i, cur);
                }
                Some(i) => {
                    s.recv(other, peer);
                    s.send(i, peer);
                    s.wait();
                    s.copy(i, cur);
                    s.reduce(other, cur);
                }
                None => {
                    s.recv(other, peer);
                    s.send(cur, peer);
                    s.wait();
                    if pn < newrank {
                        s.reduce(other, cur);
                    } else {
                        s.reduce(cur, other);
                        std::mem::swap(&mut cur, &mut other);
                    }
                }
            }
            mask <<= 1;
        }
    }
    if me < 2 * rem {
        if me % 2 == 1 {
            s.send(cur, me - 1);
            s.wait();
        } else {
            s.recv(cur, me + 1);
            s.wait();
        }
    }
    cur
}

/// Split `len` bytes of `unit`-byte elements into `n` chunks of whole
/// elements: (offset, length) of chunk `j`.
pub fn split(len: usize, unit: usize, n: i32, j: i32) -> (usize, usize) {
    let unit = unit.max(1);
    let elems = len / unit;
    let (base, extra) = (elems / n as usize, elems % n as usize);
    let j = j as usize;
    let start = j * base + j.min(extra);
    let cnt = base + usize::from(j < extra);
    (start * unit, cnt * unit)
}

/// Ring allreduce for commutative ops: reduce-scatter then allgather around
/// the ring; each chunk is reduced along one fixed path and then copied, so
/// every rank gets the same bits. `input` holds the contribution (it may be
/// `acc` itself, in place); `acc` (writable) receives the result, each chunk
/// written once, so the input is never copied as a whole.
///
/// Not in place, a partial result arrives straight in its chunk of `acc` and
/// this rank's contribution is reduced into it (`acc = input ∘ acc`: the op
/// commutes), so no byte is copied locally. In place (`input == acc`), the
/// chunk of `acc` is the contribution still to be reduced, so the partial
/// result lands in `tmp`, which must then be given and hold at least one
/// chunk (it is unused otherwise).
pub fn allreduce_ring(
    s: &mut Sched,
    n: i32,
    me: i32,
    input: Region,
    acc: Region,
    tmp: Option<Region>,
    unit: usize,
) {
    let right = (me + 1) % n;
    let left = (me - 1).rem_euclid(n);
    let part = |r: Region, j: i32| {
        let (o, l) = split(r.len, unit, n, j.rem_euclid(n));
        r.sub(o, l)
    };
    let ch = |j: i32| part(acc, j);
    for k in 0..n - 1 {
        // The first chunk sent is this rank's own contribution; later ones
        // were reduced here in the step before.
        let out = if k == 0 { part(input, me) } else { ch(me - k) };
        let inc = ch(me - k - 1);
        if input == acc {
            let t = tmp
                .expect("an in-place ring needs a temporary")
                .sub(0, inc.len);
            s.recv(t, left);
            s.send(out, right);
            s.wait();
            s.reduce(t, inc);
        } else {
            s.recv(inc, left);
            s.send(out, right);
            s.wait();
            s.reduce(part(input, me - k - 1), inc);
        }
    }
    for k in 0..n - 1 {
        let out = ch(me + 1 - k);
        let inc = ch(me - k);
        s.recv(inc, left);
        s.send(out, right);
        s.wait();
    }
}

/// Ring reduce-scatter for commutative ops over blocks `blocks` of `acc`
/// (writable, this rank's full contribution): afterwards block `me` of
/// `acc` holds the reduced block. `tmp` holds at least the largest block.
pub fn reduce_scatter_ring(s: &mut Sched, n: i32, me: i32, blocks: &[Region], tmp: Region) {
    let right = (me + 1) % n;
    let left = (me - 1).rem_euclid(n);
    let b = |j: i32| blocks[j.rem_euclid(n) as usize];
    for k in 0..n - 1 {
        let out = b(me - k - 1);
        let inc = b(me - k - 2);
        let t = tmp.sub(0, inc.len);
        if inc.len > 0 {
            s.recv(t, left);
        }
        if out.len > 0 {
            s.send(out, right);
        }
        s.wait();
        s.reduce(t, inc);
    }
}

/// Bruck allgather: `mine` is this rank's block, `out` the `n` blocks of
/// `blk` bytes in rank order; ⌈log₂ n⌉ rounds, then a local rotation.
pub fn allgather_bruck(s: &mut Sched, n: i32, me: i32, mine: Region, out: Region, blk: usize) {
    let tmp = s.temp(blk * n as usize);
    s.copy(mine, tmp.sub(0, blk));
    let mut pow = 1;
    while pow < n {
        let cnt = pow.min(n - pow) as usize;
        s.recv(tmp.sub(pow as usize * blk, cnt * blk), (me + pow) % n);
        s.send(tmp.sub(0, cnt * blk), (me - pow).rem_euclid(n));
        s.wait();
        pow *= 2;
    }
    for i in 0..n {
        let dst = ((me + i) % n) as usize;
        s.copy(tmp.sub(i as usize * blk, blk), out.sub(dst * blk, blk));
    }
}

/// Ring allgather over `blocks` (block `me` already in place): n − 1 steps
/// passing blocks to the right. Handles unequal blocks (allgatherv).
pub fn allgather_ring(s: &mut Sched, n: i32, me: i32, blocks: &[Region]) {
    let right = (me + 1) % n;
    let left = (me - 1).rem_euclid(n);
    let b = |j: i32| blocks[j.rem_euclid(n) as usize];
    for k in 0..n - 1 {
        let out = b(me - k);
        let inc = b(me - k - 1);
        if inc.len > 0 {
            s.recv(inc, left);
        }
        if out.len > 0 {
            s.send(out, right);
        }
        s.wait();
    }
}

/// Gather to `root`: every rank sends its block; the root posts all its
/// receives at once. `blocks` are the root's destination regions (ignored
/// elsewhere); `mine` is this rank's input (`None` at an in-place root).
pub fn gather_linear(
    s: &mut Sched,
    n: i32,
    me: i32,
    root: i32,
    mine: Option<Region>,
    blocks: &[Region],
) {
    if me == root {
        for i in 0..n {
            let r = blocks[i as usize];
            if i == me {
                if let Some(m) = mine {
                    s.copy(m, r);
                }
            } else if r.len > 0 {
                s.recv(r, i);
            }
        }
    } else if let Some(m) = mine.filter(|m| m.len > 0) {
        s.send(m, root);
    }
    s.wait();
}

/// Scatter from `root`: the root sends block `i` to rank `i`. `mine` is
/// where this rank's block goes (`None` at an in-place root).
pub fn scatter_linear(
    s: &mut Sched,
    n: i32,
    me: i32,
    root: i32,
    blocks: &[Region],
    mine: Option<Region>,
) {
    if me == root {
        for i in 0..n {
            let r = blocks[i as usize];
            if i == me {
                if let Some(m) = mine {
                    s.copy(r, m);
                }
            } else if r.len > 0 {
                s.send(r, i);
            }
        }
    } else if let Some(m) = mine.filter(|m| m.len > 0) {
        s.recv(m, root);
    }
    s.wait();
}

/// All-to-all: block `i` of `send` goes to rank `i`, rank `i`'s block lands
/// in `recv[i]`. `pairwise`: one exchange per step (large messages); else
/// every exchange is posted at once.
pub fn alltoall(s: &mut Sched, n: i32, me: i32, send: &[Region], recv: &[Region], pairwise: bool) {
    s.copy(send[me as usize], recv[me as usize]);
    for k in 1..n {
        let to = (me + k) % n;
        let from = (me - k).rem_euclid(n);
        let r = recv[from as usize];
        let t = send[to as usize];
        if r.len > 0 {
            s.recv(r, from);
        }
        if t.len > 0 {
            s.send(t, to);
        }
        if pairwise {
            s.wait();
        }
    }
    s.wait();
}

/// Inclusive scan by recursive doubling (MPICH's): `result` holds this rank's
/// contribution and receives the prefix; `partial` and `tmp` are scratch of
/// the same size (`partial` initialised to the contribution).
/// With `exclusive`, `result` receives the prefix of the lower ranks only
/// (untouched on rank 0).
pub fn scan(
    s: &mut Sched,
    n: i32,
    me: i32,
    result: Region,
    partial: Region,
    tmp: Region,
    exclusive: bool,
) {
    let (mut partial, mut tmp) = (partial, tmp);
    let mut have = !exclusive;
    let mut mask = 1;
    while mask < n {
        let dst = me ^ mask;
        if dst < n {
            s.recv(tmp, dst);
            s.send(partial, dst);
            s.wait();
            if me > dst {
                s.reduce(tmp, partial);
                if have {
                    s.reduce(tmp, result);
                } else {
                    s.copy(tmp, result);
                    have = true;
                }
            } else {
                s.reduce(partial, tmp);
                std::mem::swap(&mut partial, &mut tmp);
            }
        }
        mask <<= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_everything_in_whole_elements() {
        for len in [0usize, 8, 24, 800, 808] {
            for n in 1..9 {
                let mut at = 0;
                for j in 0..n {
                    let (o, l) = split(len, 8, n, j);
                    assert_eq!(o, at);
                    assert_eq!(l % 8, 0);
                    at += l;
                }
                assert_eq!(at, len);
            }
        }
    }
}
