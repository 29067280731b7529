//! Process topologies and neighbourhood collectives.
//!
//! Covers `MPI_Dims_create`, the Cartesian calls (`MPI_Cart_*`,
//! `MPI_Cartdim_get`), the graph calls (`MPI_Graph_*`, `MPI_Graphdims_get`),
//! distributed graphs (`MPI_Dist_graph_*`, with the `MPI_UNWEIGHTED` and
//! `MPI_WEIGHTS_EMPTY` data symbols), `MPI_Topo_test`, and the blocking and
//! non-blocking neighbourhood collectives (`MPI_Neighbor_*`,
//! `MPI_Ineighbor_*`).
//!
//! A topology lives in the C-side record of its communicator
//! ([`CommObj::topo`]). Creating one makes the new communicator (ranks are
//! never reordered) and a private duplicate of it: the neighbourhood
//! collectives run as point-to-point sends and receives on that duplicate,
//! so they never match the user's own messages on the communicator, and
//! non-overtaking keeps successive neighbourhood collectives in order.
//!
//! Neighbour order is the standard's: for a Cartesian topology, for each
//! dimension the −1 then the +1 neighbour (`MPI_PROC_NULL` at the edge of a
//! non-periodic dimension: a neighbour with which no data moves); for a
//! graph, `MPI_Graph_neighbors`; for a distributed graph, the sources and
//! destinations as `MPI_Dist_graph_neighbors` gives them. In a Cartesian
//! topology, data sent to the −1 neighbour lands in that process's +1
//! block, even where both neighbours are the same process (a periodic
//! dimension of size 1 or 2): each direction has its own tag.

use std::ffi::{c_int, c_void};

use gmpi::{Communicator, Error, ErrorClass, Request, View};

use crate::abi::*;
use crate::p2p::{persistent_coll, Snap};
use crate::ptr;
use crate::resolve;
use crate::tables::*;

// ---- MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY ----

/// An `int *` data symbol of the ABI (`extern int * const MPI_UNWEIGHTED;`).
#[repr(transparent)]
#[derive(Debug)]
pub struct IntPtr(*const c_int);

// SAFETY: the pointer is never dereferenced (callers only compare against
// it), and it points at an immutable static, so sharing it between threads
// is harmless.
unsafe impl Sync for IntPtr {}

static UNWEIGHTED_TARGET: c_int = 0x5745_4947;
static WEIGHTS_EMPTY_TARGET: c_int = 0x454d_5054;

/// `MPI_UNWEIGHTED`: passed as the weights of an unweighted graph.
#[no_mangle]
pub static MPI_UNWEIGHTED: IntPtr = IntPtr(&UNWEIGHTED_TARGET);

/// `MPI_WEIGHTS_EMPTY`: the weights of a process with no edges in a
/// weighted graph.
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: IntPtr = IntPtr(&WEIGHTS_EMPTY_TARGET);

fn is_unweighted(p: *const c_int) -> bool {
    std::ptr::eq(p, MPI_UNWEIGHTED.0)
}

fn is_weights_empty(p: *const c_int) -> bool {
    std::ptr::eq(p, MPI_WEIGHTS_EMPTY.0)
}

// ---- helpers ----

fn e(class: ErrorClass, call: &str, what: impl std::fmt::Display) -> Error {
    err(class, call, what)
}

/// The topology of communicator `h` (after checking the handle).
fn topo_of(call: &str, h: MPI_Comm) -> Result<(Communicator, Option<Topo>), Error> {
    let c = resolve::comm(call, h)?;
    let t = resolve::with_comm(call, h, |o| o.topo.clone())?;
    Ok((c.into_owned(), t))
}

/// The topology of `h`, which must have one.
fn any_topo(call: &str, h: MPI_Comm) -> Result<(Communicator, Topo), Error> {
    match topo_of(call, h)? {
        (c, Some(t)) => Ok((c, t)),
        (_, None) => Err(e(
            ErrorClass::Topology,
            call,
            "comm has no process topology",
        )),
    }
}

fn kind_name(t: &Option<Topo>) -> &'static str {
    match t {
        None => "no topology",
        Some(Topo::Cart { .. }) => "a Cartesian topology",
        Some(Topo::Graph { .. }) => "a graph topology",
        Some(Topo::DistGraph { .. }) => "a distributed graph topology",
    }
}

/// A Cartesian communicator's `(comm, dims, periods)`.
fn cart_of(call: &str, h: MPI_Comm) -> Result<(Communicator, Vec<c_int>, Vec<bool>), Error> {
    match topo_of(call, h)? {
        (c, Some(Topo::Cart { dims, periods, .. })) => Ok((c, dims, periods)),
        (_, t) => Err(e(
            ErrorClass::Topology,
            call,
            format!("comm has {}, not a Cartesian topology", kind_name(&t)),
        )),
    }
}

/// A graph communicator's `(comm, index, edges)`.
fn graph_of(call: &str, h: MPI_Comm) -> Result<(Communicator, Vec<c_int>, Vec<c_int>), Error> {
    match topo_of(call, h)? {
        (c, Some(Topo::Graph { index, edges, .. })) => Ok((c, index, edges)),
        (_, t) => Err(e(
            ErrorClass::Topology,
            call,
            format!("comm has {}, not a graph topology", kind_name(&t)),
        )),
    }
}

/// Register the new topology communicator `c` made from `old`: it inherits
/// `old`'s error handler; its topology gets a private duplicate of `c`.
fn register(
    old: MPI_Comm,
    c: Communicator,
    make: impl FnOnce(Communicator) -> Topo,
) -> Result<MPI_Comm, Error> {
    let nbr = c.dup()?;
    let errh = crate::errors::errhandler_of(old);
    let mut obj = CommObj::new(c, String::new());
    obj.errh = errh;
    obj.topo = Some(make(nbr));
    Ok(new_comm(obj))
}

/// The product of `dims` (all positive), or `None` past `c_int`.
fn product(dims: &[c_int]) -> Option<c_int> {
    dims.iter().try_fold(1 as c_int, |a, &d| a.checked_mul(d))
}

/// Check `ndims` and the `dims` of a Cartesian grid; the grid's size.
fn check_dims(
    call: &str,
    ndims: c_int,
    dims: *const c_int,
    size: c_int,
    too_big: ErrorClass,
) -> Result<(Vec<c_int>, c_int), Error> {
    if ndims < 0 {
        return Err(e(
            ErrorClass::Dims,
            call,
            format!("ndims = {ndims} is negative"),
        ));
    }
    let d = ptr::slice(call, "dims", dims, ndims as usize)?.to_vec();
    if let Some((i, &v)) = d.iter().enumerate().find(|(_, &v)| v <= 0) {
        return Err(e(
            ErrorClass::Dims,
            call,
            format!("dims[{i}] = {v} is not positive"),
        ));
    }
    let n = product(&d).filter(|&n| n <= size).ok_or_else(|| {
        e(
            too_big,
            call,
            format!("the grid {d:?} has more processes than the communicator's {size}"),
        )
    })?;
    Ok((d, n))
}

/// Row-major coordinates of `rank` in `dims`.
fn coords_of(dims: &[c_int], mut rank: c_int) -> Vec<c_int> {
    let mut c = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        c[i] = rank % dims[i];
        rank /= dims[i];
    }
    c
}

/// The rank at `coords` (wrapped in periodic dimensions), or `None` if a
/// coordinate of a non-periodic dimension is out of range.
fn rank_at(dims: &[c_int], periods: &[bool], coords: &[c_int]) -> Option<c_int> {
    let mut r: c_int = 0;
    for i in 0..dims.len() {
        let mut x = coords[i];
        if periods[i] {
            x = x.rem_euclid(dims[i]);
        } else if !(0..dims[i]).contains(&x) {
            return None;
        }
        r = r * dims[i] + x;
    }
    Some(r)
}

/// The `(source, dest)` of a shift by `disp` along `dir` from `rank`.
fn shift(dims: &[c_int], periods: &[bool], rank: c_int, dir: usize, disp: c_int) -> (c_int, c_int) {
    let me = coords_of(dims, rank);
    let at = |delta: i64| {
        let mut c = me.clone();
        let x = c[dir] as i64 + delta;
        if !periods[dir] && !(0..dims[dir] as i64).contains(&x) {
            return MPI_PROC_NULL;
        }
        c[dir] = x.rem_euclid(dims[dir] as i64) as c_int;
        rank_at(dims, periods, &c).unwrap_or(MPI_PROC_NULL)
    };
    (at(-(disp as i64)), at(disp as i64))
}

/// The index and edges of a graph, checked.
fn check_graph(
    call: &str,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    size: c_int,
) -> Result<(Vec<c_int>, Vec<c_int>), Error> {
    if nnodes < 0 {
        return Err(e(
            ErrorClass::Arg,
            call,
            format!("nnodes = {nnodes} is negative"),
        ));
    }
    if nnodes > size {
        return Err(e(
            ErrorClass::Arg,
            call,
            format!("nnodes = {nnodes} is larger than the communicator's size {size}"),
        ));
    }
    let idx = ptr::slice(call, "index", index, nnodes as usize)?.to_vec();
    let mut prev = 0;
    for (i, &v) in idx.iter().enumerate() {
        if v < prev {
            return Err(e(
                ErrorClass::Arg,
                call,
                format!("index[{i}] = {v} is smaller than the previous entry ({prev}): index must be cumulative degrees"),
            ));
        }
        prev = v;
    }
    let ne = idx.last().copied().unwrap_or(0) as usize;
    let ed = ptr::slice(call, "edges", edges, ne)?.to_vec();
    if let Some((i, &v)) = ed
        .iter()
        .enumerate()
        .find(|(_, &v)| !(0..nnodes).contains(&v))
    {
        return Err(e(
            ErrorClass::Arg,
            call,
            format!("edges[{i}] = {v} is not a node (0..{nnodes})"),
        ));
    }
    Ok((idx, ed))
}

/// The neighbours of node `r` of a graph.
fn graph_nbrs(index: &[c_int], edges: &[c_int], r: usize) -> Vec<c_int> {
    let lo = if r == 0 { 0 } else { index[r - 1] as usize };
    edges[lo..index[r] as usize].to_vec()
}

/// Check a list of `n` ranks of a communicator of `size`.
fn check_ranks(
    call: &str,
    what: &str,
    p: *const c_int,
    n: usize,
    size: c_int,
) -> Result<Vec<c_int>, Error> {
    let v = ptr::slice(call, what, p, n)?.to_vec();
    if let Some((i, &r)) = v.iter().enumerate().find(|(_, &r)| !(0..size).contains(&r)) {
        return Err(e(
            ErrorClass::Rank,
            call,
            format!("{what}[{i}] = {r} is not a rank of comm_old (size {size})"),
        ));
    }
    Ok(v)
}

/// The weights of `n` edges at `p`: `None` for `MPI_UNWEIGHTED`.
fn weights(call: &str, what: &str, p: *const c_int, n: usize) -> Result<Option<Vec<c_int>>, Error> {
    if is_unweighted(p) {
        return Ok(None);
    }
    if is_weights_empty(p) {
        if n > 0 {
            return Err(e(
                ErrorClass::Arg,
                call,
                format!("{what} is MPI_WEIGHTS_EMPTY but there are {n} edges"),
            ));
        }
        return Ok(Some(Vec::new()));
    }
    let w = ptr::slice(call, what, p, n)?.to_vec();
    if let Some((i, &x)) = w.iter().enumerate().find(|(_, &x)| x < 0) {
        return Err(e(
            ErrorClass::Arg,
            call,
            format!("{what}[{i}] = {x} is negative"),
        ));
    }
    Ok(Some(w))
}

fn out_comm(call: &str, p: *mut MPI_Comm) -> Result<(), Error> {
    if p.is_null() {
        return Err(e(
            ErrorClass::Arg,
            call,
            "the new-communicator argument is NULL",
        ));
    }
    Ok(())
}

/// Balanced factorisation of `nnodes` over `dims` (zeros free).
fn dims_create(call: &str, nnodes: c_int, dims: &mut [c_int]) -> Result<(), Error> {
    if let Some((i, &v)) = dims.iter().enumerate().find(|(_, &v)| v < 0) {
        return Err(e(
            ErrorClass::Dims,
            call,
            format!("dims[{i}] = {v} is negative"),
        ));
    }
    let fixed = dims
        .iter()
        .filter(|&&d| d > 0)
        .try_fold(1i64, |a, &d| {
            a.checked_mul(d as i64).filter(|&p| p <= i32::MAX as i64)
        })
        .unwrap_or(i64::MAX);
    let free = dims.iter().filter(|&&d| d == 0).count();
    if nnodes as i64 % fixed != 0 {
        return Err(e(
            ErrorClass::Dims,
            call,
            format!(
                "nnodes = {nnodes} is not a multiple of the product of the non-zero dims ({fixed})"
            ),
        ));
    }
    let m = nnodes as i64 / fixed;
    if free == 0 {
        if m != 1 {
            return Err(e(
                ErrorClass::Dims,
                call,
                format!(
                    "the dims are all set and their product ({fixed}) is not nnodes = {nnodes}"
                ),
            ));
        }
        return Ok(());
    }
    let f = balanced(m as u64, free, u64::MAX).expect("1 × … × m always works");
    let mut it = f.into_iter();
    for d in dims.iter_mut().filter(|d| **d == 0) {
        *d = it.next().expect("one factor per free dimension") as c_int;
    }
    Ok(())
}

/// The lexicographically smallest non-increasing `k` factors of `m`, each at
/// most `cap` (the most balanced factorisation).
fn balanced(m: u64, k: usize, cap: u64) -> Option<Vec<u64>> {
    if k == 0 {
        return (m == 1).then(Vec::new);
    }
    if k == 1 {
        return (m <= cap).then(|| vec![m]);
    }
    let mut divs: Vec<u64> = Vec::new();
    let mut d = 1;
    while d * d <= m {
        if m.is_multiple_of(d) {
            divs.push(d);
            divs.push(m / d);
        }
        d += 1;
    }
    divs.sort_unstable();
    divs.dedup();
    for &d in divs.iter().filter(|&&d| d <= cap) {
        // The first factor is the largest: d^k must reach m.
        let reach = (0..k)
            .try_fold(1u64, |a, _| a.checked_mul(d))
            .unwrap_or(u64::MAX);
        if reach < m {
            continue;
        }
        if let Some(mut rest) = balanced(m / d, k - 1, d) {
            rest.insert(0, d);
            return Some(rest);
        }
    }
    None
}

// ---- topology calls ----

/// Topologies live on intracommunicators only.
fn intra(call: &str, c: &gmpi::Communicator) -> Result<(), Error> {
    if c.is_inter() {
        Err(err(
            ErrorClass::Comm,
            call,
            "comm is an intercommunicator (topologies need an intracommunicator)",
        ))
    } else {
        Ok(())
    }
}

mpi_fn! {
    fn Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) {
        if ndims < 0 {
            return Err(e(ErrorClass::Dims, CALL, format!("ndims = {ndims} is negative")));
        }
        if nnodes <= 0 {
            return Err(e(ErrorClass::Arg, CALL, format!("nnodes = {nnodes} is not positive")));
        }
        let d = ptr::slice_mut(CALL, "dims", dims, ndims as usize)?;
        let mut work = d.to_vec();
        dims_create(CALL, nnodes, &mut work)?;
        d.copy_from_slice(&work);
        Ok(())
    }

    fn Cart_create(comm_old: MPI_Comm, ndims: c_int, dims: *const c_int, periods: *const c_int, reorder: c_int, comm_cart: *mut MPI_Comm) {
        let _ = reorder;
        let c = resolve::comm(CALL, comm_old)?;
        intra(CALL, &c)?;
        let (d, n) = check_dims(CALL, ndims, dims, c.size(), ErrorClass::Arg)?;
        let p: Vec<bool> = ptr::slice(CALL, "periods", periods, d.len())?.iter().map(|&x| x != 0).collect();
        out_comm(CALL, comm_cart)?;
        let color = if c.rank() < n { 0 } else { gmpi::UNDEFINED };
        let h = match c.split(color, c.rank())? {
            None => MPI_COMM_NULL,
            Some(new) => register(comm_old, new, |nbr| Topo::Cart { dims: d, periods: p, nbr })?,
        };
        ptr::write(CALL, "comm_cart", comm_cart, h)
    }

    fn Cart_map(comm: MPI_Comm, ndims: c_int, dims: *const c_int, periods: *const c_int, newrank: *mut c_int) {
        let c = resolve::comm(CALL, comm)?;
        intra(CALL, &c)?;
        let (d, n) = check_dims(CALL, ndims, dims, c.size(), ErrorClass::Dims)?;
        ptr::slice(CALL, "periods", periods, d.len())?;
        let r = if c.rank() < n { c.rank() } else { MPI_UNDEFINED };
        ptr::write(CALL, "newrank", newrank, r)
    }

    fn Cartdim_get(comm: MPI_Comm, ndims: *mut c_int) {
        let (_, d, _) = cart_of(CALL, comm)?;
        ptr::write(CALL, "ndims", ndims, d.len() as c_int)
    }

    fn Cart_get(comm: MPI_Comm, maxdims: c_int, dims: *mut c_int, periods: *mut c_int, coords: *mut c_int) {
        let (c, d, p) = cart_of(CALL, comm)?;
        let max = ptr::len(CALL, "maxdims", maxdims)?;
        if max < d.len() {
            return Err(e(ErrorClass::Arg, CALL, format!("maxdims = {maxdims} is less than the topology's {} dimensions", d.len())));
        }
        let n = d.len();
        let od = ptr::slice_mut(CALL, "dims", dims, n)?;
        let op = ptr::slice_mut(CALL, "periods", periods, n)?;
        let oc = ptr::slice_mut(CALL, "coords", coords, n)?;
        od.copy_from_slice(&d);
        for (o, &x) in op.iter_mut().zip(&p) {
            *o = x as c_int;
        }
        oc.copy_from_slice(&coords_of(&d, c.rank()));
        Ok(())
    }

    fn Cart_rank(comm: MPI_Comm, coords: *const c_int, rank: *mut c_int) {
        let (_, d, p) = cart_of(CALL, comm)?;
        let co = ptr::slice(CALL, "coords", coords, d.len())?;
        let r = rank_at(&d, &p, co).ok_or_else(|| {
            let i = (0..d.len()).find(|&i| !p[i] && !(0..d[i]).contains(&co[i])).unwrap_or(0);
            e(ErrorClass::Rank, CALL, format!("coords[{i}] = {} is outside dimension {i} (size {}, not periodic)", co[i], d[i]))
        })?;
        ptr::write(CALL, "rank", rank, r)
    }

    fn Cart_coords(comm: MPI_Comm, rank: c_int, maxdims: c_int, coords: *mut c_int) {
        let (c, d, _) = cart_of(CALL, comm)?;
        if !(0..c.size()).contains(&rank) {
            return Err(e(ErrorClass::Rank, CALL, format!("rank = {rank} is not a rank of comm (size {})", c.size())));
        }
        let max = ptr::len(CALL, "maxdims", maxdims)?;
        if max < d.len() {
            return Err(e(ErrorClass::Arg, CALL, format!("maxdims = {maxdims} is less than the topology's {} dimensions", d.len())));
        }
        ptr::slice_mut(CALL, "coords", coords, d.len())?.copy_from_slice(&coords_of(&d, rank));
        Ok(())
    }

    fn Cart_shift(comm: MPI_Comm, direction: c_int, disp: c_int, rank_source: *mut c_int, rank_dest: *mut c_int) {
        let (c, d, p) = cart_of(CALL, comm)?;
        if d.is_empty() {
            return Err(e(ErrorClass::Topology, CALL, "comm has a zero-dimensional Cartesian topology: there is no direction to shift along"));
        }
        if !(0..d.len() as c_int).contains(&direction) {
            return Err(e(ErrorClass::Arg, CALL, format!("direction = {direction} is not a dimension (0..{})", d.len())));
        }
        if rank_source.is_null() || rank_dest.is_null() {
            return Err(e(ErrorClass::Arg, CALL, "rank_source or rank_dest is NULL"));
        }
        let (s, t) = shift(&d, &p, c.rank(), direction as usize, disp);
        ptr::write(CALL, "rank_source", rank_source, s)?;
        ptr::write(CALL, "rank_dest", rank_dest, t)
    }

    fn Cart_sub(comm: MPI_Comm, remain_dims: *const c_int, newcomm: *mut MPI_Comm) {
        let (c, d, p) = cart_of(CALL, comm)?;
        let keep: Vec<bool> = ptr::slice(CALL, "remain_dims", remain_dims, d.len())?.iter().map(|&x| x != 0).collect();
        out_comm(CALL, newcomm)?;
        let me = coords_of(&d, c.rank());
        // Color: the position among the dropped dimensions; key: among the kept.
        let (mut color, mut key) = (0 as c_int, 0 as c_int);
        let (mut sd, mut sp) = (Vec::new(), Vec::new());
        for i in 0..d.len() {
            if keep[i] {
                key = key * d[i] + me[i];
                sd.push(d[i]);
                sp.push(p[i]);
            } else {
                color = color * d[i] + me[i];
            }
        }
        let new = c.split(color, key)?.expect("every rank gives a color");
        let h = register(comm, new, |nbr| Topo::Cart { dims: sd, periods: sp, nbr })?;
        ptr::write(CALL, "newcomm", newcomm, h)
    }

    fn Topo_test(comm: MPI_Comm, status: *mut c_int) {
        let (_, t) = topo_of(CALL, comm)?;
        let k = match t {
            None => MPI_UNDEFINED,
            Some(Topo::Cart { .. }) => MPI_CART,
            Some(Topo::Graph { .. }) => MPI_GRAPH,
            Some(Topo::DistGraph { .. }) => MPI_DIST_GRAPH,
        };
        ptr::write(CALL, "status", status, k)
    }

    fn Graph_create(comm_old: MPI_Comm, nnodes: c_int, index: *const c_int, edges: *const c_int, reorder: c_int, comm_graph: *mut MPI_Comm) {
        let _ = reorder;
        let c = resolve::comm(CALL, comm_old)?;
        intra(CALL, &c)?;
        let (idx, ed) = check_graph(CALL, nnodes, index, edges, c.size())?;
        out_comm(CALL, comm_graph)?;
        let color = if c.rank() < nnodes { 0 } else { gmpi::UNDEFINED };
        let h = match c.split(color, c.rank())? {
            None => MPI_COMM_NULL,
            Some(new) => register(comm_old, new, |nbr| Topo::Graph { index: idx, edges: ed, nbr })?,
        };
        ptr::write(CALL, "comm_graph", comm_graph, h)
    }

    fn Graph_map(comm: MPI_Comm, nnodes: c_int, index: *const c_int, edges: *const c_int, newrank: *mut c_int) {
        let c = resolve::comm(CALL, comm)?;
        intra(CALL, &c)?;
        check_graph(CALL, nnodes, index, edges, c.size())?;
        let r = if c.rank() < nnodes { c.rank() } else { MPI_UNDEFINED };
        ptr::write(CALL, "newrank", newrank, r)
    }

    fn Graphdims_get(comm: MPI_Comm, nnodes: *mut c_int, nedges: *mut c_int) {
        let (_, idx, ed) = graph_of(CALL, comm)?;
        if nnodes.is_null() || nedges.is_null() {
            return Err(e(ErrorClass::Arg, CALL, "nnodes or nedges is NULL"));
        }
        ptr::write(CALL, "nnodes", nnodes, idx.len() as c_int)?;
        ptr::write(CALL, "nedges", nedges, ed.len() as c_int)
    }

    fn Graph_get(comm: MPI_Comm, maxindex: c_int, maxedges: c_int, index: *mut c_int, edges: *mut c_int) {
        let (_, idx, ed) = graph_of(CALL, comm)?;
        let mi = ptr::len(CALL, "maxindex", maxindex)?;
        let me = ptr::len(CALL, "maxedges", maxedges)?;
        if mi < idx.len() || me < ed.len() {
            return Err(e(ErrorClass::Arg, CALL, format!(
                "maxindex = {maxindex} and maxedges = {maxedges} must be at least the graph's {} nodes and {} edges", idx.len(), ed.len())));
        }
        let oi = ptr::slice_mut(CALL, "index", index, idx.len())?;
        let oe = ptr::slice_mut(CALL, "edges", edges, ed.len())?;
        oi.copy_from_slice(&idx);
        oe.copy_from_slice(&ed);
        Ok(())
    }

    fn Graph_neighbors_count(comm: MPI_Comm, rank: c_int, nneighbors: *mut c_int) {
        let (_, idx, ed) = graph_of(CALL, comm)?;
        if !(0..idx.len() as c_int).contains(&rank) {
            return Err(e(ErrorClass::Rank, CALL, format!("rank = {rank} is not a node of the graph (0..{})", idx.len())));
        }
        ptr::write(CALL, "nneighbors", nneighbors, graph_nbrs(&idx, &ed, rank as usize).len() as c_int)
    }

    fn Graph_neighbors(comm: MPI_Comm, rank: c_int, maxneighbors: c_int, neighbors: *mut c_int) {
        let (_, idx, ed) = graph_of(CALL, comm)?;
        if !(0..idx.len() as c_int).contains(&rank) {
            return Err(e(ErrorClass::Rank, CALL, format!("rank = {rank} is not a node of the graph (0..{})", idx.len())));
        }
        let n = graph_nbrs(&idx, &ed, rank as usize);
        let max = ptr::len(CALL, "maxneighbors", maxneighbors)?;
        if max < n.len() {
            return Err(e(ErrorClass::Arg, CALL, format!("maxneighbors = {maxneighbors} is less than the {} neighbours of rank {rank}", n.len())));
        }
        ptr::slice_mut(CALL, "neighbors", neighbors, n.len())?.copy_from_slice(&n);
        Ok(())
    }

    fn Dist_graph_create_adjacent(comm_old: MPI_Comm, indegree: c_int, sources: *const c_int, sourceweights: *const c_int,
        outdegree: c_int, destinations: *const c_int, destweights: *const c_int, info: MPI_Info, reorder: c_int,
        comm_dist_graph: *mut MPI_Comm) {
        let _ = reorder;
        let c = resolve::comm(CALL, comm_old)?;
        intra(CALL, &c)?;
        let nin = ptr::len(CALL, "indegree", indegree)?;
        let nout = ptr::len(CALL, "outdegree", outdegree)?;
        let src = check_ranks(CALL, "sources", sources, nin, c.size())?;
        let dst = check_ranks(CALL, "destinations", destinations, nout, c.size())?;
        let sw = weights(CALL, "sourceweights", sourceweights, nin)?;
        let dw = weights(CALL, "destweights", destweights, nout)?;
        let weighted = match (&sw, &dw) {
            (None, None) => false,
            (Some(_), Some(_)) => true,
            // A side without edges may say either.
            (None, Some(_)) if nout == 0 => false,
            (Some(_), None) if nin == 0 => false,
            _ => return Err(e(ErrorClass::Arg, CALL, "sourceweights and destweights must both be MPI_UNWEIGHTED or both be weights")),
        };
        resolve::check_info(CALL, info)?;
        out_comm(CALL, comm_dist_graph)?;
        let new = c.dup()?;
        let h = register(comm_old, new, |nbr| Topo::DistGraph {
            sources: src,
            sourceweights: if weighted { sw.unwrap_or_default() } else { Vec::new() },
            destinations: dst,
            destweights: if weighted { dw.unwrap_or_default() } else { Vec::new() },
            weighted,
            nbr,
        })?;
        ptr::write(CALL, "comm_dist_graph", comm_dist_graph, h)
    }

    fn Dist_graph_create(comm_old: MPI_Comm, n: c_int, sources: *const c_int, degrees: *const c_int,
        destinations: *const c_int, weights_: *const c_int, info: MPI_Info, reorder: c_int,
        comm_dist_graph: *mut MPI_Comm) {
        let _ = reorder;
        let c = resolve::comm(CALL, comm_old)?;
        intra(CALL, &c)?;
        let size = c.size();
        let n = ptr::len(CALL, "n", n)?;
        let src = check_ranks(CALL, "sources", sources, n, size)?;
        let deg = ptr::slice(CALL, "degrees", degrees, n)?.to_vec();
        if let Some((i, &x)) = deg.iter().enumerate().find(|(_, &x)| x < 0) {
            return Err(e(ErrorClass::Arg, CALL, format!("degrees[{i}] = {x} is negative")));
        }
        let total = deg.iter().map(|&x| x as usize).sum::<usize>();
        let dst = check_ranks(CALL, "destinations", destinations, total, size)?;
        let w = weights(CALL, "weights", weights_, total)?;
        let weighted = w.is_some();
        resolve::check_info(CALL, info)?;
        out_comm(CALL, comm_dist_graph)?;
        // Every edge (s, d, w) goes to s (an out-edge there) and d (an
        // in-edge there): one message per pair of processes.
        let mut out: Vec<Vec<c_int>> = vec![Vec::new(); size as usize];
        let mut k = 0;
        for (i, &s) in src.iter().enumerate() {
            for _ in 0..deg[i] {
                let d = dst[k];
                let wt = w.as_ref().map_or(1, |w| w[k]);
                out[s as usize].extend([s, d, wt]);
                if d != s {
                    out[d as usize].extend([s, d, wt]);
                }
                k += 1;
            }
        }
        let scounts: Vec<c_int> = out.iter().map(|v| v.len() as c_int).collect();
        let mut rcounts = vec![0 as c_int; size as usize];
        c.alltoall(&scounts[..], &mut rcounts[..])?;
        let displs = |counts: &[c_int]| -> Vec<c_int> {
            counts.iter().scan(0, |a, &x| { let d = *a; *a += x; Some(d) }).collect()
        };
        let sdispls = displs(&scounts);
        let rdispls = displs(&rcounts);
        let sbuf: Vec<c_int> = out.concat();
        let mut rbuf = vec![0 as c_int; rcounts.iter().map(|&x| x as usize).sum()];
        c.alltoallv(&sbuf[..], &scounts, &sdispls, &mut rbuf[..], &rcounts, &rdispls)?;
        let me = c.rank();
        let (mut is, mut iw, mut os, mut ow) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for t in rbuf.chunks_exact(3) {
            let (s, d, wt) = (t[0], t[1], t[2]);
            if d == me {
                is.push(s);
                iw.push(wt);
            }
            if s == me {
                os.push(d);
                ow.push(wt);
            }
        }
        if !weighted {
            iw.clear();
            ow.clear();
        }
        let new = c.dup()?;
        let h = register(comm_old, new, |nbr| Topo::DistGraph {
            sources: is,
            sourceweights: iw,
            destinations: os,
            destweights: ow,
            weighted,
            nbr,
        })?;
        ptr::write(CALL, "comm_dist_graph", comm_dist_graph, h)
    }

    fn Dist_graph_neighbors_count(comm: MPI_Comm, indegree: *mut c_int, outdegree: *mut c_int, weighted: *mut c_int) {
        let (_, t) = any_topo(CALL, comm)?;
        let Topo::DistGraph { sources, destinations, weighted: w, .. } = &t else {
            return Err(e(ErrorClass::Topology, CALL, format!("comm has {}, not a distributed graph topology", kind_name(&Some(t.clone())))));
        };
        if indegree.is_null() || outdegree.is_null() || weighted.is_null() {
            return Err(e(ErrorClass::Arg, CALL, "indegree, outdegree or weighted is NULL"));
        }
        ptr::write(CALL, "indegree", indegree, sources.len() as c_int)?;
        ptr::write(CALL, "outdegree", outdegree, destinations.len() as c_int)?;
        ptr::write(CALL, "weighted", weighted, *w as c_int)
    }

    fn Dist_graph_neighbors(comm: MPI_Comm, maxindegree: c_int, sources: *mut c_int, sourceweights: *mut c_int,
        maxoutdegree: c_int, destinations: *mut c_int, destweights: *mut c_int) {
        let (_, t) = any_topo(CALL, comm)?;
        let Topo::DistGraph { sources: s, sourceweights: sw, destinations: d, destweights: dw, weighted, .. } = &t else {
            return Err(e(ErrorClass::Topology, CALL, format!("comm has {}, not a distributed graph topology", kind_name(&Some(t.clone())))));
        };
        let mi = ptr::len(CALL, "maxindegree", maxindegree)?;
        let mo = ptr::len(CALL, "maxoutdegree", maxoutdegree)?;
        if mi < s.len() || mo < d.len() {
            return Err(e(ErrorClass::Arg, CALL, format!(
                "maxindegree = {maxindegree} and maxoutdegree = {maxoutdegree} must be at least the indegree {} and outdegree {}", s.len(), d.len())));
        }
        ptr::slice_mut(CALL, "sources", sources, s.len())?.copy_from_slice(s);
        ptr::slice_mut(CALL, "destinations", destinations, d.len())?.copy_from_slice(d);
        if *weighted {
            let ignore = |p: *mut c_int| is_unweighted(p) || is_weights_empty(p);
            if !ignore(sourceweights) {
                ptr::slice_mut(CALL, "sourceweights", sourceweights, sw.len())?.copy_from_slice(sw);
            }
            if !ignore(destweights) {
                ptr::slice_mut(CALL, "destweights", destweights, dw.len())?.copy_from_slice(dw);
            }
        }
        Ok(())
    }
}

// ---- neighbourhood collectives ----

/// Tag of the graph topologies' messages on the private communicator.
const GRAPH_TAG: c_int = 1;

/// The neighbours of this process and the tags of the messages to and from
/// each: `(in: [(source, tag)], out: [(dest, tag)])`.
type Nbrs = (Vec<(c_int, c_int)>, Vec<(c_int, c_int)>);

fn neighbours(t: &Topo, rank: c_int) -> Nbrs {
    match t {
        Topo::Cart { dims, periods, .. } => {
            let (mut ins, mut outs) = (Vec::new(), Vec::new());
            for dir in 0..dims.len() {
                let (minus, plus) = shift(dims, periods, rank, dir, 1);
                // What goes to the −1 neighbour carries tag 2·dir + 1 and is
                // received there as from its +1 neighbour, and vice versa.
                let (to_minus, to_plus) = (2 * dir as c_int + 1, 2 * dir as c_int + 2);
                ins.push((minus, to_plus));
                ins.push((plus, to_minus));
                outs.push((minus, to_minus));
                outs.push((plus, to_plus));
            }
            (ins, outs)
        }
        Topo::Graph { index, edges, .. } => {
            let n = if (rank as usize) < index.len() {
                graph_nbrs(index, edges, rank as usize)
            } else {
                Vec::new()
            };
            let v: Vec<_> = n.into_iter().map(|r| (r, GRAPH_TAG)).collect();
            (v.clone(), v)
        }
        Topo::DistGraph {
            sources,
            destinations,
            ..
        } => (
            sources.iter().map(|&r| (r, GRAPH_TAG)).collect(),
            destinations.iter().map(|&r| (r, GRAPH_TAG)).collect(),
        ),
    }
}

/// The sends and receives of one neighbourhood collective.
struct Plan {
    comm: MPI_Comm,
    nbr: Communicator,
    recvs: Vec<(View, c_int, c_int)>,
    sends: Vec<(View, c_int, c_int)>,
}

/// The topology communicator `h`, its neighbours, and an empty plan.
fn plan(call: &str, h: MPI_Comm) -> Result<(Plan, Nbrs), Error> {
    let (c, t) = any_topo(call, h)?;
    let n = neighbours(&t, c.rank());
    Ok((
        Plan {
            comm: h,
            nbr: t.nbr().clone(),
            recvs: Vec::new(),
            sends: Vec::new(),
        },
        n,
    ))
}

fn no_in_place(call: &str, what: &str, p: *const c_void) -> Result<(), Error> {
    if ptr::in_place(p) {
        return Err(e(
            ErrorClass::Buffer,
            call,
            format!("{what} is MPI_IN_PLACE, which neighbourhood collectives do not accept"),
        ));
    }
    Ok(())
}

/// The view of `count` elements of `dt` at byte offset `off` from `base`.
fn view_at(
    call: &str,
    what: &str,
    base: *const c_void,
    off: isize,
    count: c_int,
    dt: &gmpi::UserDatatype,
    writable: bool,
) -> Result<View, Error> {
    ptr::buf(
        call,
        what,
        base.cast::<u8>().wrapping_offset(off).cast(),
        count,
        dt,
        writable,
    )
}

/// `i × count × extent`, checked.
fn offset(call: &str, i: usize, count: c_int, extent: isize) -> Result<isize, Error> {
    (i as isize)
        .checked_mul(count as isize)
        .and_then(|x| x.checked_mul(extent))
        .ok_or_else(|| e(ErrorClass::Count, call, "the buffer offsets overflow"))
}

/// `n` counts at `p` (each non-negative).
fn counts(call: &str, what: &str, p: *const c_int, n: usize) -> Result<Vec<c_int>, Error> {
    let v = ptr::slice(call, what, p, n)?.to_vec();
    for (i, &x) in v.iter().enumerate() {
        ptr::count(call, &format!("{what}[{i}]"), x)?;
    }
    Ok(v)
}

impl Plan {
    /// Post every receive then every send on the private communicator.
    fn post(self, call: &str) -> Result<(Vec<Request<'static>>, Communicator, MPI_Comm), Error> {
        let mut reqs = Vec::with_capacity(self.recvs.len() + self.sends.len());
        for (mut v, src, tag) in self.recvs {
            reqs.push(ptr::detach_req(self.nbr.irecv(&mut v, src, tag)?));
        }
        for (v, dst, tag) in self.sends {
            reqs.push(ptr::detach_req(self.nbr.isend(&v, dst, tag)?));
        }
        let _ = call;
        Ok((reqs, self.nbr, self.comm))
    }

    /// Run it to completion (blocking forms).
    fn run(self, call: &str) -> Result<(), Error> {
        let (reqs, _, _) = self.post(call)?;
        gmpi::wait_all(reqs).map(|_| ())
    }

    /// Start it and store the request (non-blocking forms).
    fn start(self, call: &str, request: *mut MPI_Request) -> Result<(), Error> {
        if request.is_null() {
            return Err(e(ErrorClass::Arg, call, "request is NULL"));
        }
        let (reqs, nbr, comm) = self.post(call)?;
        // The MPI request's own status is an empty one (a receive from
        // MPI_PROC_NULL, complete at once).
        let primary = ptr::detach_req(nbr.irecv(&mut [0u8; 0], MPI_PROC_NULL, MPI_ANY_TAG)?);
        let h = new_request(Active::group(primary, reqs, comm));
        ptr::write(call, "request", request, h)
    }
}

#[allow(clippy::too_many_arguments)]
fn allgather(
    call: &str,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Either,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let (mut pl, (ins, outs)) = plan(call, comm)?;
    no_in_place(call, "sendbuf", sendbuf)?;
    no_in_place(call, "recvbuf", recvbuf)?;
    let st = resolve::dtype(call, sendtype)?;
    let rt = resolve::dtype(call, recvtype)?;
    ptr::count(call, "sendcount", sendcount)?;
    let sv = ptr::buf(call, "sendbuf", sendbuf, sendcount, &st, false)?;
    let (rc, rd) = match recvcounts {
        Either::Same(n) => {
            ptr::count(call, "recvcount", n)?;
            let rc = vec![n; ins.len()];
            let rd = (0..ins.len())
                .map(|i| offset(call, i, n, rt.extent()))
                .collect::<Result<Vec<_>, _>>()?;
            (rc, rd)
        }
        Either::Each(c, d) => {
            let rc = counts(call, "recvcounts", c, ins.len())?;
            let rd = ptr::slice(call, "displs", d, ins.len())?
                .iter()
                .map(|&x| offset(call, 1, x, rt.extent()))
                .collect::<Result<Vec<_>, _>>()?;
            (rc, rd)
        }
    };
    for (i, &(src, tag)) in ins.iter().enumerate() {
        let v = view_at(call, "recvbuf", recvbuf, rd[i], rc[i], &rt, true)?;
        pl.recvs.push((v, src, tag));
    }
    for &(dst, tag) in &outs {
        pl.sends.push((sv.clone(), dst, tag));
    }
    Ok(pl)
}

/// Receive counts: one for all, or per neighbour with displacements.
#[derive(Debug, Clone, Copy)]
enum Either {
    Same(c_int),
    Each(*const c_int, *const c_int),
}

#[allow(clippy::too_many_arguments)]
fn alltoall(
    call: &str,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let (mut pl, (ins, outs)) = plan(call, comm)?;
    no_in_place(call, "sendbuf", sendbuf)?;
    no_in_place(call, "recvbuf", recvbuf)?;
    let st = resolve::dtype(call, sendtype)?;
    let rt = resolve::dtype(call, recvtype)?;
    ptr::count(call, "sendcount", sendcount)?;
    ptr::count(call, "recvcount", recvcount)?;
    for (i, &(src, tag)) in ins.iter().enumerate() {
        let off = offset(call, i, recvcount, rt.extent())?;
        let v = view_at(call, "recvbuf", recvbuf, off, recvcount, &rt, true)?;
        pl.recvs.push((v, src, tag));
    }
    for (i, &(dst, tag)) in outs.iter().enumerate() {
        let off = offset(call, i, sendcount, st.extent())?;
        let v = view_at(call, "sendbuf", sendbuf, off, sendcount, &st, false)?;
        pl.sends.push((v, dst, tag));
    }
    Ok(pl)
}

#[allow(clippy::too_many_arguments)]
fn alltoallv(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let (mut pl, (ins, outs)) = plan(call, comm)?;
    no_in_place(call, "sendbuf", sendbuf)?;
    no_in_place(call, "recvbuf", recvbuf)?;
    let st = resolve::dtype(call, sendtype)?;
    let rt = resolve::dtype(call, recvtype)?;
    let sc = counts(call, "sendcounts", sendcounts, outs.len())?;
    let sd = ptr::slice(call, "sdispls", sdispls, outs.len())?;
    let rc = counts(call, "recvcounts", recvcounts, ins.len())?;
    let rd = ptr::slice(call, "rdispls", rdispls, ins.len())?;
    for (i, &(src, tag)) in ins.iter().enumerate() {
        let off = offset(call, 1, rd[i], rt.extent())?;
        let v = view_at(call, "recvbuf", recvbuf, off, rc[i], &rt, true)?;
        pl.recvs.push((v, src, tag));
    }
    for (i, &(dst, tag)) in outs.iter().enumerate() {
        let off = offset(call, 1, sd[i], st.extent())?;
        let v = view_at(call, "sendbuf", sendbuf, off, sc[i], &st, false)?;
        pl.sends.push((v, dst, tag));
    }
    Ok(pl)
}

#[allow(clippy::too_many_arguments)]
fn alltoallw(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let (mut pl, (ins, outs)) = plan(call, comm)?;
    no_in_place(call, "sendbuf", sendbuf)?;
    no_in_place(call, "recvbuf", recvbuf)?;
    let sc = counts(call, "sendcounts", sendcounts, outs.len())?;
    let sd = ptr::slice(call, "sdispls", sdispls, outs.len())?;
    let sts = ptr::slice(call, "sendtypes", sendtypes, outs.len())?;
    let rc = counts(call, "recvcounts", recvcounts, ins.len())?;
    let rd = ptr::slice(call, "rdispls", rdispls, ins.len())?;
    let rts = ptr::slice(call, "recvtypes", recvtypes, ins.len())?;
    for (i, &(src, tag)) in ins.iter().enumerate() {
        let t = resolve::dtype(call, rts[i])?;
        let v = view_at(call, "recvbuf", recvbuf, rd[i], rc[i], &t, true)?;
        pl.recvs.push((v, src, tag));
    }
    for (i, &(dst, tag)) in outs.iter().enumerate() {
        let t = resolve::dtype(call, sts[i])?;
        let v = view_at(call, "sendbuf", sendbuf, sd[i], sc[i], &t, false)?;
        pl.sends.push((v, dst, tag));
    }
    Ok(pl)
}

mpi_fn! {
    fn Neighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        allgather(CALL, sendbuf, sendcount, sendtype, recvbuf, Either::Same(recvcount), recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        allgather(CALL, sendbuf, sendcount, sendtype, recvbuf, Either::Same(recvcount), recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        allgather(CALL, sendbuf, sendcount, sendtype, recvbuf, Either::Each(recvcounts, displs), recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        allgather(CALL, sendbuf, sendcount, sendtype, recvbuf, Either::Each(recvcounts, displs), recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        alltoall(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm) {
        alltoallv(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm,
        request: *mut MPI_Request) {
        alltoallv(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm) {
        alltoallw(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)?.run(CALL)
    }
    fn Ineighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm,
        request: *mut MPI_Request) {
        alltoallw(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)?.start(CALL, request)
    }
}

// ---- the large-count (`_c`) neighbourhood collectives ----
//
// Counts and displacements arrive as `MPI_Count`/`MPI_Aint`; they go on as
// `int`s (MPI_ERR_COUNT, or MPI_ERR_ARG for a displacement, past `int`:
// messages this large are not supported here), read when the call (or, for
// a persistent one, each start) is made.

/// `v` as an `int`, or `class` naming `what`.
fn narrow<T: Copy + std::fmt::Display + TryInto<c_int>>(
    call: &str,
    what: &str,
    v: T,
    class: ErrorClass,
) -> Result<c_int, Error> {
    v.try_into().map_err(|_| {
        e(
            class,
            call,
            format!("{what} = {v} does not fit in an int (large counts are not supported here)"),
        )
    })
}

/// The `n` elements of a `_c` call's count or displacement array, as `int`s.
fn narrow_arr<T: Copy + std::fmt::Display + TryInto<c_int>>(
    call: &str,
    what: &str,
    p: *const T,
    n: usize,
    class: ErrorClass,
) -> Result<Vec<c_int>, Error> {
    ptr::slice(call, what, p, n)?
        .iter()
        .enumerate()
        .map(|(i, &x)| narrow(call, &format!("{what}[{i}]"), x, class))
        .collect()
}

/// The in- and out-degree of `comm`'s topology.
fn degrees(call: &str, comm: MPI_Comm) -> Result<(usize, usize), Error> {
    let (_, (ins, outs)) = plan(call, comm)?;
    Ok((ins.len(), outs.len()))
}

#[allow(clippy::too_many_arguments)]
fn allgather_c(
    call: &str,
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let sc = narrow(call, "sendcount", sendcount, ErrorClass::Count)?;
    let rc = narrow(call, "recvcount", recvcount, ErrorClass::Count)?;
    allgather(
        call,
        sendbuf,
        sc,
        sendtype,
        recvbuf,
        Either::Same(rc),
        recvtype,
        comm,
    )
}

#[allow(clippy::too_many_arguments)]
fn allgatherv_c(
    call: &str,
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    displs: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let (nin, _) = degrees(call, comm)?;
    let sc = narrow(call, "sendcount", sendcount, ErrorClass::Count)?;
    let rc = narrow_arr(call, "recvcounts", recvcounts, nin, ErrorClass::Count)?;
    let rd = narrow_arr(call, "displs", displs, nin, ErrorClass::Arg)?;
    let each = Either::Each(rc.as_ptr(), rd.as_ptr());
    allgather(call, sendbuf, sc, sendtype, recvbuf, each, recvtype, comm)
}

#[allow(clippy::too_many_arguments)]
fn alltoall_c(
    call: &str,
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let sc = narrow(call, "sendcount", sendcount, ErrorClass::Count)?;
    let rc = narrow(call, "recvcount", recvcount, ErrorClass::Count)?;
    alltoall(call, sendbuf, sc, sendtype, recvbuf, rc, recvtype, comm)
}

#[allow(clippy::too_many_arguments)]
fn alltoallv_c(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let (nin, nout) = degrees(call, comm)?;
    let sc = narrow_arr(call, "sendcounts", sendcounts, nout, ErrorClass::Count)?;
    let sd = narrow_arr(call, "sdispls", sdispls, nout, ErrorClass::Arg)?;
    let rc = narrow_arr(call, "recvcounts", recvcounts, nin, ErrorClass::Count)?;
    let rd = narrow_arr(call, "rdispls", rdispls, nin, ErrorClass::Arg)?;
    alltoallv(
        call,
        sendbuf,
        sc.as_ptr(),
        sd.as_ptr(),
        sendtype,
        recvbuf,
        rc.as_ptr(),
        rd.as_ptr(),
        recvtype,
        comm,
    )
}

#[allow(clippy::too_many_arguments)]
fn alltoallw_c(
    call: &str,
    sendbuf: *const c_void,
    sendcounts: *const MPI_Count,
    sdispls: *const MPI_Aint,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const MPI_Count,
    rdispls: *const MPI_Aint,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
) -> Result<Plan, Error> {
    let (nin, nout) = degrees(call, comm)?;
    let sc = narrow_arr(call, "sendcounts", sendcounts, nout, ErrorClass::Count)?;
    let rc = narrow_arr(call, "recvcounts", recvcounts, nin, ErrorClass::Count)?;
    alltoallw(
        call,
        sendbuf,
        sc.as_ptr(),
        sdispls,
        sendtypes,
        recvbuf,
        rc.as_ptr(),
        rdispls,
        recvtypes,
        comm,
    )
}

mpi_fn! {
    fn Neighbor_allgather_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm) {
        allgather_c(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_allgather_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        allgather_c(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_allgatherv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm) {
        allgatherv_c(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_allgatherv_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        allgatherv_c(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_alltoall_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm) {
        alltoall_c(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_alltoall_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, request: *mut MPI_Request) {
        alltoall_c(CALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_alltoallv_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm) {
        alltoallv_c(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)?.run(CALL)
    }
    fn Ineighbor_alltoallv_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm,
        request: *mut MPI_Request) {
        alltoallv_c(CALL, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)?.start(CALL, request)
    }
    fn Neighbor_alltoallw_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm) {
        alltoallw_c(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)?.run(CALL)
    }
    fn Ineighbor_alltoallw_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm,
        request: *mut MPI_Request) {
        alltoallw_c(CALL, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)?.start(CALL, request)
    }
}

// ---- persistent neighbourhood collectives (MPI 4.0) ----
//
// `MPI_<Coll>_init` records the non-blocking collective with its arguments;
// each `MPI_Start` runs it again (buffers and count arrays are read then).

mpi_fn! {
    fn Neighbor_allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            allgather(call, sendbuf, sendcount, sendtype, recvbuf, Either::Same(recvcount), recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (nin_, _) = degrees(CALL, comm)?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(nin_))?;
        let displs = Snap::take(CALL, "displs", displs, Some(nin_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            let displs = displs.ptr();
            allgather(call, sendbuf, sendcount, sendtype, recvbuf, Either::Each(recvcounts, displs), recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            alltoall(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (nin_, nout_) = degrees(CALL, comm)?;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, Some(nout_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, Some(nout_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(nin_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(nin_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            alltoallv(call, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (nin_, nout_) = degrees(CALL, comm)?;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, Some(nout_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, Some(nout_))?;
        let sendtypes = Snap::take(CALL, "sendtypes", sendtypes, Some(nout_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(nin_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(nin_))?;
        let recvtypes = Snap::take(CALL, "recvtypes", recvtypes, Some(nin_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let sendtypes = sendtypes.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            let recvtypes = recvtypes.ptr();
            alltoallw(call, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)?.start(call, request)
        }))
    }

    fn Neighbor_allgather_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            allgather_c(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_allgatherv_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (nin_, _) = degrees(CALL, comm)?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(nin_))?;
        let displs = Snap::take(CALL, "displs", displs, Some(nin_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let recvcounts = recvcounts.ptr();
            let displs = displs.ptr();
            allgatherv_c(call, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_alltoall_init_c(sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            alltoall_c(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_alltoallv_init_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (nin_, nout_) = degrees(CALL, comm)?;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, Some(nout_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, Some(nout_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(nin_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(nin_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            alltoallv_c(call, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)?.start(call, request)
        }))
    }
    fn Neighbor_alltoallw_init_c(sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count, rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm, info: MPI_Info, request: *mut MPI_Request) {
        let (nin_, nout_) = degrees(CALL, comm)?;
        let sendcounts = Snap::take(CALL, "sendcounts", sendcounts, Some(nout_))?;
        let sdispls = Snap::take(CALL, "sdispls", sdispls, Some(nout_))?;
        let sendtypes = Snap::take(CALL, "sendtypes", sendtypes, Some(nout_))?;
        let recvcounts = Snap::take(CALL, "recvcounts", recvcounts, Some(nin_))?;
        let rdispls = Snap::take(CALL, "rdispls", rdispls, Some(nin_))?;
        let recvtypes = Snap::take(CALL, "recvtypes", recvtypes, Some(nin_))?;
        let (sendbuf, recvbuf,) = (sendbuf as usize, recvbuf as usize,);
        persistent_coll(CALL, comm, info, request, CollStart::new(move |call, request| {
            let (sendbuf, recvbuf,) = (sendbuf as *const c_void, recvbuf as *mut c_void,);
            let sendcounts = sendcounts.ptr();
            let sdispls = sdispls.ptr();
            let sendtypes = sendtypes.ptr();
            let recvcounts = recvcounts.ptr();
            let rdispls = rdispls.ptr();
            let recvtypes = recvtypes.ptr();
            alltoallw_c(call, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)?.start(call, request)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dc(n: c_int, mut d: Vec<c_int>) -> Vec<c_int> {
        dims_create("t", n, &mut d).unwrap();
        d
    }

    #[test]
    fn dims_are_balanced() {
        assert_eq!(dc(6, vec![0, 0]), [3, 2]);
        assert_eq!(dc(7, vec![0, 0]), [7, 1]);
        assert_eq!(dc(16, vec![0, 0, 0]), [4, 2, 2]);
        assert_eq!(dc(24, vec![0, 0, 0]), [4, 3, 2]);
        assert_eq!(dc(36, vec![0, 0]), [6, 6]);
        assert_eq!(dc(12, vec![0, 3, 0]), [2, 3, 2]);
        assert_eq!(dc(1, vec![]), Vec::<c_int>::new());
        assert_eq!(dc(1 << 20, vec![0; 20]), [2; 20]);
        for (n, k) in [
            (223_092_870, 9),
            (1 << 30, 30),
            (2_147_483_647, 3),
            (720_720, 6),
        ] {
            let d = dc(n, vec![0; k]);
            assert_eq!(d.iter().product::<c_int>(), n);
            assert!(d.windows(2).all(|w| w[0] >= w[1]), "{d:?}");
        }
        assert_eq!(
            dc(223_092_870, vec![0; 9]),
            [23, 19, 17, 13, 11, 7, 5, 3, 2]
        );
        assert!(dims_create("t", 10, &mut [0, 3]).is_err());
        assert!(dims_create("t", 10, &mut [5, 3]).is_err());
        assert!(dims_create("t", 10, &mut [-1, 0]).is_err());
    }

    #[test]
    fn cart_arithmetic() {
        let d = [2, 3];
        assert_eq!(coords_of(&d, 4), [1, 1]);
        assert_eq!(rank_at(&d, &[false, true], &[1, -1]), Some(5));
        assert_eq!(rank_at(&d, &[false, true], &[2, 0]), None);
        assert_eq!(shift(&d, &[false, true], 0, 0, 1), (MPI_PROC_NULL, 3));
        assert_eq!(shift(&d, &[false, true], 0, 1, 1), (2, 1));
    }
}
