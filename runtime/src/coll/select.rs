//! The algorithm selector: which algorithm a collective call runs, chosen
//! by pure functions of plain inputs ([`Query`]: the collective, how it was
//! called, the communicator and message sizes, the shared-memory area;
//! [`Settings`]: the thresholds of the configuration) and nothing else, so
//! the whole choice is tested here with a table of cases.
//!
//! | collective | shared-memory area (single-node, blocking, up to `coll_shm_max`; any memory kind) | otherwise |
//! |---|---|---|
//! | barrier | the area's barrier | dissemination |
//! | bcast | one-way: the root writes, the others read (an exchange with `coll_check`; 1 B to half a slot of host memory: the tiny road; above half a slot, up to `coll_shm_pipeline_max` (64 MiB), one-way in chunks; past that, from `coll_shm_copy_min` below [`COPY_ROOTED_MAX`], where every rank can read the others by CMA, single copy: the readers copy from the root's memory) | binomial tree below `bcast_large` (128 KiB) or on 2 ranks, scatter + ring allgather from there |
//! | reduce | one-way gather to the root, which alone waits, reduced in rank order (an exchange with `coll_check`; the tiny road as for bcast; above half a slot, up to `coll_shm_pipeline_max`, an exchange per chunk) | binomial tree (in rank order for non-commutative ops) |
//! | allreduce | one exchange (1 B to seven eighths of a slot: the tiny road, in place or of device memory only to [`TINY`] bytes; above that, up to `coll_shm_pipeline_max`, one per chunk), reduced in rank order | recursive doubling below `allreduce_large` (64 KiB), ring from there (commutative ops, an element per rank) |
//! | gather | one-way to the root (above a slot, single copy as for bcast); gatherv one-way to the root whatever its size, blocks that do not fit moving by point-to-point (`shm/vform.rs`) | linear |
//! | scatter | one-way: the root writes every block, each rank reads its own (where the blocks do not fit a slot, single copy from `coll_shm_copy_min` at any size); scatterv the same whatever its size, all ranks falling back when the blocks do not fit | linear |
//! | allgather | one exchange (not in place; above a slot per rank, up to `coll_shm_pipeline_max` per rank, one per chunk; past that, single copy from half of `coll_shm_copy_min` per rank; allgatherv sized by the whole result) | Bruck below `allgather_large` (64 KiB in all), ring from there and for allgatherv |
//! | alltoall | one exchange (where the blocks do not fit a slot, single copy from `coll_shm_copy_min` per peer, not in place); alltoallv/w whatever their size, a rank whose blocks do not fit a slot saying where they lie when one is `coll_shm_copy_min`, every rank falling back to pairwise when some rank's blocks do not fit otherwise | every exchange at once below `alltoall_large` (8 KiB per peer), pairwise from there |
//! | reduce_scatter | one exchange of the whole inputs, each rank reduces its block in rank order (above a slot, up to `coll_shm_pipeline_max` of the whole input, an exchange per chunk of every other rank's block) | ring (commutative ops), else a rank-order reduce to rank 0 and a scatter |
//! | scan, exscan | — | recursive doubling |
//!
//! One rank, or no data, is [`Algo::Local`] where the collective has
//! nothing to exchange.
//!
//! Every rank of a call must make the same choice. The inputs are the ones
//! every rank of a call shares: the sizes, the configuration, the op, the
//! form of the call and the communicator; the area is set up collectively.
//! The kind of memory a rank passes (host, device, managed) is not an
//! input: MPI lets each rank pass its own, so a choice made by it would
//! send ranks down different roads and hang the call. The area therefore
//! takes every kind (`shm/` stages device and managed bytes through host
//! memory), and the schedules move every kind. A caller must not add
//! inputs that may differ between ranks.
//!
//! The area is set up (collectively) on its first use: a caller asks
//! [`area_wanted`] first, and only then sets the area up and looks at it
//! (`Communicator::choose`, `run.rs`); `GMPI_LOG=coll=debug` prints each
//! choice ([`Said`]).

use std::fmt;

use super::shm::wire::HDR;

/// A kibibyte.
pub(crate) const KIB: usize = 1024;

/// A mebibyte.
const MIB: usize = 1024 * KIB;

/// The largest allreduce, in bytes, that takes the tiny road in place or
/// from or into device memory (`Communicator::allreduce_tiny`, which then
/// builds its contribution, or stages its result, on the stack; larger
/// ones take the general road, which makes the same exchange): up to
/// here, at np 2 on the development machine, the road's saving (no views,
/// no packing, 0.03–0.15 µs a call) beat the extra copy through the stack.
/// (A scatterv root's table and blocks up to here are assembled on the
/// stack too; larger ones are published from the send buffer.)
pub(crate) const TINY: usize = 1024;

/// The collective being chosen for (the `v`, `w`, in-place and `i` forms
/// are the same collective: see [`Query::vform`], [`Query::in_place`],
/// [`Query::form`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coll {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
    Allgather,
    Alltoall,
    /// `reduce_scatter` and `reduce_scatter_block`.
    ReduceScatter,
    /// `scan` and `exscan`.
    Scan,
}

/// How the collective was called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A blocking call of the application: the form that uses the
    /// shared-memory area (and sets it up). (The `i`-forms keep away from
    /// it: their epochs would be ordered with the blocking calls', and
    /// programs order the two apart: mpi4py's `test_ulfm` starts an
    /// `MPI_Iallreduce` on one rank before a barrier that the others enter
    /// first.)
    Blocking,
    /// An `i`-form: a schedule parked in the engine (a small allreduce's
    /// through the communicator's area of non-blocking collectives, where
    /// it has one: [`nb_area_wanted`]).
    Nonblocking,
    /// The runtime's own collectives (finalize's barrier, the agreement on
    /// context ids, `coll_check`'s exchange): schedules driven at once.
    Internal,
}

/// What a caller knows of the communicator's shared-memory area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    /// None to use: not set up (yet), none could be, or it broke.
    None,
    /// A working area whose slots hold `slot` bytes each (header included);
    /// `single_copy`: every rank can read the others' memory by CMA.
    Ready { slot: usize, single_copy: bool },
}

/// The inputs of one choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Query {
    pub coll: Coll,
    pub form: Form,
    /// Ranks of the communicator.
    pub n: i32,
    /// The size the choice goes by: the buffer (bcast), one rank's
    /// contribution (reduce, allreduce, scan, gather; scatter: its block),
    /// the whole result (allgather: every block; reduce_scatter: the whole
    /// input), the largest block to one peer (alltoall). 0 for a barrier.
    pub bytes: usize,
    /// Every member lives on this node.
    pub one_node: bool,
    /// The shared-memory area, as far as the caller has looked.
    pub area: Area,
    /// The op is commutative (reductions).
    pub commutative: bool,
    /// Bytes of one reduction element (allreduce's ring needs at least one
    /// element per rank).
    pub unit: usize,
    /// `MPI_IN_PLACE`.
    pub in_place: bool,
    /// A `v` or `w` form: per-rank counts, so blocks may differ in size.
    pub vform: bool,
}

impl Query {
    /// A query with the common case for the rest: several nodes, no area
    /// looked at, a commutative op of 1-byte elements, not in place, not a
    /// `v` form.
    pub(crate) const fn new(coll: Coll, form: Form, n: i32, bytes: usize) -> Self {
        Query {
            coll,
            form,
            n,
            bytes,
            one_node: false,
            area: Area::None,
            commutative: true,
            unit: 1,
            in_place: false,
            vform: false,
        }
    }

    /// With [`Query::one_node`] set.
    pub(crate) const fn one_node(self, one_node: bool) -> Self {
        Query { one_node, ..self }
    }

    /// With [`Query::area`] set.
    pub(crate) const fn area(self, area: Area) -> Self {
        Query { area, ..self }
    }

    /// With [`Query::commutative`] set.
    pub(crate) const fn commutative(self, commutative: bool) -> Self {
        Query {
            commutative,
            ..self
        }
    }

    /// With [`Query::unit`] set.
    pub(crate) const fn unit(self, unit: usize) -> Self {
        Query { unit, ..self }
    }

    /// With [`Query::in_place`] set.
    pub(crate) const fn in_place(self, in_place: bool) -> Self {
        Query { in_place, ..self }
    }

    /// With [`Query::vform`] set.
    pub(crate) const fn vform(self, vform: bool) -> Self {
        Query { vform, ..self }
    }
}

/// The part of the configuration (`gmpi.toml`, `GMPI_*`) the choice reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `coll_shm`: single-node communicators may use a shared-memory area.
    pub shm: bool,
    /// `coll_shm_max`: the largest contribution per rank the area takes.
    pub shm_max: usize,
    /// `coll_shm_pipeline_max`: bcast, reduce, allreduce, allgather and
    /// reduce-scatter above `shm_max` go through the area in chunks up to
    /// this size (per rank: the allgather's block).
    pub shm_pipeline_max: usize,
    /// `coll_shm_copy_min`: bcast, gather, scatter, allgather and alltoall
    /// blocks from this size copied straight from their owners' memory.
    pub shm_copy_min: usize,
    /// `coll_check`: every call first checks that the ranks agree (which the
    /// tiny road cannot do).
    pub check: bool,
    /// `bcast_large`: scatter + ring allgather from here.
    pub bcast_large: usize,
    /// `allreduce_large`: ring from here.
    pub allreduce_large: usize,
    /// `allgather_large`: ring from here (bytes of the whole result).
    pub allgather_large: usize,
    /// `alltoall_large`: pairwise from here (bytes per peer).
    pub alltoall_large: usize,
}

impl Settings {
    /// The defaults, measured on real machines.
    pub(crate) const DEFAULT: Settings = Settings {
        shm: true,
        shm_max: 16 * KIB,
        // The chunked roads beat point-to-point and single copy at every
        // size measured (np 2 and 4 on 2 cores: bcast 0.2-0.5 of the time
        // from 128 KiB to 16 MiB, allgather 0.5-0.9, reduce 0.5-0.8,
        // allreduce 0.6-0.9).
        shm_pipeline_max: 64 * MIB,
        shm_copy_min: 16 * KIB,
        check: false,
        bcast_large: 128 * KIB,
        allreduce_large: 64 * KIB,
        allgather_large: 64 * KIB,
        alltoall_large: 8 * KIB,
    };

    /// The settings of a configuration (unset thresholds take the defaults).
    #[inline]
    pub(crate) fn of(cfg: &crate::config::Config) -> Self {
        let d = Self::DEFAULT;
        Settings {
            shm: cfg.coll_shm,
            shm_max: cfg.coll_shm_max.unwrap_or(d.shm_max),
            // The area's headers carry a length of 32 bits.
            shm_pipeline_max: cfg
                .coll_shm_pipeline_max
                .unwrap_or(d.shm_pipeline_max)
                .min(u32::MAX as usize),
            shm_copy_min: cfg.coll_shm_copy_min.unwrap_or(d.shm_copy_min).max(1),
            check: cfg.coll_check,
            bcast_large: cfg.bcast_large.unwrap_or(d.bcast_large),
            allreduce_large: cfg.allreduce_large.unwrap_or(d.allreduce_large),
            allgather_large: cfg.allgather_large.unwrap_or(d.allgather_large),
            alltoall_large: cfg.alltoall_large.unwrap_or(d.alltoall_large),
        }
    }
}

/// An algorithm (the builders of `algo.rs`, or the shared-memory area).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algo {
    /// Through the shared-memory area (`shm/`): its barrier, or one
    /// exchange of every rank's contribution.
    Shm,
    /// Through the area's slots, which say where each rank's data lies;
    /// the readers copy it straight from the owners' memory by CMA
    /// (`shm/copy.rs`).
    ShmCopy,
    /// Nothing to exchange (one rank, or no data): local copies at most.
    Local,
    /// `algo::barrier`.
    Dissemination,
    /// `algo::bcast_binomial`.
    BcastBinomial,
    /// `algo::bcast_scatter_allgather`.
    BcastScatterAllgather,
    /// `algo::reduce_binomial`; rooted at rank 0 and combined in rank order
    /// for a non-commutative op.
    ReduceBinomial { rank_order: bool },
    /// `algo::allreduce_recursive_doubling`.
    AllreduceRecursiveDoubling,
    /// `algo::allreduce_ring`: reduce-scatter + allgather.
    AllreduceRing,
    /// `algo::gather_linear`.
    GatherLinear,
    /// `algo::scatter_linear`.
    ScatterLinear,
    /// `algo::allgather_bruck`.
    AllgatherBruck,
    /// `algo::allgather_ring`.
    AllgatherRing,
    /// `algo::alltoall`, every exchange posted at once.
    AlltoallAtOnce,
    /// `algo::alltoall`, one peer pair after another.
    AlltoallPairwise,
    /// `algo::reduce_scatter_ring`.
    ReduceScatterRing,
    /// `algo::reduce_binomial` in rank order to rank 0, then
    /// `algo::scatter_linear`.
    ReduceScatterRankOrder,
    /// `algo::scan`.
    ScanRecursiveDoubling,
}

/// Bytes this rank puts in its slot of the area (after the header).
#[inline]
fn area_bytes(q: &Query) -> usize {
    match q.coll {
        Coll::Barrier => 0,
        // Sized inside (`shm/vform.rs`): the ranks do not all know the sizes.
        _ if sized_inside(q) => 0,
        // Equal blocks: each rank's is the n-th part of the result; an
        // allgatherv's blocks are at most the whole result.
        Coll::Allgather if q.vform => q.bytes,
        Coll::Allgather => q.bytes / q.n.max(1) as usize,
        // Equal blocks: each rank publishes its whole send buffer; a
        // scatter's root every rank's block.
        Coll::Alltoall | Coll::Scatter => q.bytes.saturating_mul(q.n.max(0) as usize),
        _ => q.bytes,
    }
}

/// Whether the collective goes through the area in chunks when its
/// contribution is larger than a slot (`shm/pipeline.rs`).
#[inline]
fn pipelines(q: &Query) -> bool {
    !q.vform
        && matches!(
            q.coll,
            Coll::Bcast | Coll::Reduce | Coll::Allreduce | Coll::Allgather | Coll::ReduceScatter
        )
}

/// Whether this call goes through the shared-memory area if the area is
/// there and has room: the question to ask before setting it up (which is
/// itself collective) or looking at it.
#[inline]
pub(crate) fn area_wanted(q: &Query, s: &Settings) -> bool {
    let has_path = match q.coll {
        Coll::Barrier | Coll::Bcast | Coll::Reduce | Coll::Allreduce => true,
        Coll::Gather | Coll::Alltoall | Coll::Scatter => true,
        Coll::Allgather => !q.in_place,
        // The counts are the same on every rank: the total is too.
        Coll::ReduceScatter => true,
        Coll::Scan => false,
    };
    has_path
        && q.form == Form::Blocking
        && q.one_node
        && q.n >= 2
        && s.shm
        && (in_area_sizes(q, s) || copies(q, s))
}

/// Whether the call's contribution is one the area's slots carry: up to
/// `coll_shm_max`, or up to `coll_shm_pipeline_max` where it [`pipelines`].
#[inline]
fn in_area_sizes(q: &Query, s: &Settings) -> bool {
    area_bytes(q) <= s.shm_max || pipelines(q) && area_bytes(q) <= s.shm_pipeline_max
}

/// Whether the call's blocks are copied straight from their owners' memory
/// ([`Algo::ShmCopy`], where the area says every rank can): a call the
/// area's slots cannot carry (in one slot, or in chunks where it
/// [`pipelines`]) whose blocks are large enough: a bcast, gather or
/// scatter of at least `coll_shm_copy_min` bytes per block, an alltoall
/// (not in place) too, an allgather of half that (an allgatherv by its
/// mean block); not the other `v` forms. A bcast or gather below
/// [`COPY_ROOTED_MAX`] only.
///
/// Where the slots carry it they win: CMA's system call and page walk
/// cost more than the second copy (np 2 on the development machine, slots
/// against CMA: a 32 KiB bcast 0.71 µs against 3.8, a 16 KiB gather 1.1
/// against 3.0, an alltoall of 8 KiB per peer 2.3 against 3.6, an
/// allgather of 64 KiB per rank 6.4 against 7.8; np 4 on 2 cores, an
/// allgather of 16 KiB 8.1 against 21.9), and below `coll_shm_copy_min`
/// point-to-point does (an alltoall of 8 KiB per peer at np 4: 14.3
/// against 26.9).
#[inline]
fn copies(q: &Query, s: &Settings) -> bool {
    let min = s.shm_copy_min;
    let fits = |block: usize, min: usize| (min..COPY_ROOTED_MAX).contains(&block);
    if in_area_sizes(q, s) {
        return false;
    }
    match q.coll {
        // The ranks of a gatherv, scatterv or alltoallv do not all know the
        // sizes: the ones that publish them decide (`shm/vform.rs`).
        _ if sized_inside(q) => false,
        Coll::Bcast | Coll::Gather => fits(q.bytes, min),
        Coll::Scatter => q.bytes >= min,
        Coll::Alltoall => !q.in_place && q.bytes >= min,
        // An allgatherv by its whole result, as the slot road sizes it.
        Coll::Allgather => q.bytes / q.n.max(1) as usize >= min.div_ceil(2),
        _ => false,
    }
}

/// Where a bcast or gather leaves the single-copy road: from here the
/// point-to-point road's cooperative copy (`shm_coop_min`, 128 KiB), in
/// which the sender writes part of the data while the receiver reads the
/// rest, beat one reader copying all of it (np 2, the development
/// machine: a 1 MiB bcast 23 µs against 46, a gather 91 against 161; at
/// 128 KiB, since the cooperative copy starts there, a gather 7.3-8.0
/// against 10.3-11.3, a bcast 2.0-2.1 against 2.2-2.3; a scatter, every
/// rank reading its block, and the exchanges win at every size).
pub(crate) const COPY_ROOTED_MAX: usize = 128 * KIB;

/// Whether the call is a `v` form whose sizes not every rank knows
/// (gatherv, scatterv, alltoallv/w): the selector sends it to the area
/// whatever its size, and the ranks that know the sizes decide there
/// whether the data fits or goes by point-to-point (`shm/vform.rs`).
#[inline]
fn sized_inside(q: &Query) -> bool {
    q.vform && matches!(q.coll, Coll::Gather | Coll::Scatter | Coll::Alltoall)
}

/// Whether [`Query::area`] has room for this call's contribution (in one
/// slot, or a reduction element per chunk where it [`pipelines`]).
#[inline]
fn area_fits(q: &Query) -> bool {
    match q.area {
        Area::Ready { slot, .. } => {
            // A reduce-scatter's chunk holds a unit of every other rank's
            // block.
            let unit = match q.coll {
                Coll::ReduceScatter => q.unit.max(1).saturating_mul(q.n.max(2) as usize - 1),
                _ => q.unit.max(1),
            };
            in_one_slot(q) || pipelines(q) && unit.saturating_add(HDR) <= slot
        }
        Area::None => false,
    }
}

/// Whether [`Query::area`] has a slot for the whole contribution.
#[inline]
fn in_one_slot(q: &Query) -> bool {
    match q.area {
        Area::Ready { slot, .. } => area_bytes(q).saturating_add(HDR) <= slot,
        Area::None => false,
    }
}

/// The algorithm of a call.
#[inline]
pub(crate) fn select(q: &Query, s: &Settings) -> Algo {
    if area_wanted(q, s) {
        if copies(q, s)
            && matches!(
                q.area,
                Area::Ready {
                    single_copy: true,
                    ..
                }
            )
        {
            return Algo::ShmCopy;
        }
        if in_area_sizes(q, s) && area_fits(q) {
            return Algo::Shm;
        }
    }
    let (n, bytes) = (q.n, q.bytes);
    match q.coll {
        Coll::Barrier => Algo::Dissemination,
        Coll::Bcast if n < 2 || bytes == 0 => Algo::Local,
        Coll::Bcast if bytes >= s.bcast_large && n > 2 => Algo::BcastScatterAllgather,
        Coll::Bcast => Algo::BcastBinomial,
        Coll::Reduce if n < 2 => Algo::Local,
        Coll::Reduce => Algo::ReduceBinomial {
            rank_order: !q.commutative,
        },
        Coll::Allreduce
            if n > 1
                && bytes >= s.allreduce_large
                && q.commutative
                && bytes / q.unit.max(1) >= n as usize =>
        {
            Algo::AllreduceRing
        }
        Coll::Allreduce if n > 1 && bytes > 0 => Algo::AllreduceRecursiveDoubling,
        Coll::Allreduce => Algo::Local,
        Coll::Gather => Algo::GatherLinear,
        Coll::Scatter => Algo::ScatterLinear,
        Coll::Allgather if !q.vform && bytes < s.allgather_large && n > 1 => Algo::AllgatherBruck,
        Coll::Allgather => Algo::AllgatherRing,
        Coll::Alltoall if bytes >= s.alltoall_large => Algo::AlltoallPairwise,
        Coll::Alltoall => Algo::AlltoallAtOnce,
        Coll::ReduceScatter if n > 1 && q.commutative => Algo::ReduceScatterRing,
        Coll::ReduceScatter if n > 1 => Algo::ReduceScatterRankOrder,
        Coll::ReduceScatter => Algo::Local,
        Coll::Scan if n > 1 => Algo::ScanRecursiveDoubling,
        Coll::Scan => Algo::Local,
    }
}

/// Whether a blocking allreduce, bcast, reduce, gather or scatter, or a
/// `v` form, may take the tiny road, before looking at the area: the
/// shared-memory choice, for 1 byte to a slot (per rank; for a
/// gatherv, scatterv or alltoallv, what this rank itself publishes; for an
/// allgatherv, the whole result), without `coll_check`. (The
/// caller has already checked the rest of what the road needs: contiguous
/// buffers of one predefined type, an op with a kernel.)
///
/// The largest call it takes is a whole slot, `coll_shm_max` ([`tiny_room`]
/// still wants the call in one, and not in chunks on the general road):
/// the tiny roads make no copy the general road does not (they publish
/// from the user's buffer and read into it; they only skip its views and
/// temporaries), but for an allreduce in place or of device memory, which
/// the road itself leaves to the general one above [`TINY`] bytes.
/// Measured at np 2 on the development machine (2 KiB, µs per call, the
/// tiny road against the general one): bcast 0.11 against 0.18, reduce
/// 0.18 against 0.28, allreduce 0.34 against 0.50-0.54, gather 0.17
/// against 0.30, scatter 0.15 against 0.29, gatherv 0.17 against 0.31,
/// scatterv 0.24 against 0.33.
#[inline]
pub(crate) fn tiny_wanted(q: &Query, s: &Settings) -> bool {
    let coll = match q.vform {
        false => matches!(
            q.coll,
            Coll::Allreduce
                | Coll::Bcast
                | Coll::Reduce
                | Coll::Gather
                | Coll::Scatter
                | Coll::Allgather
                | Coll::Alltoall
                | Coll::ReduceScatter
        ),
        true => sized_inside(q) || q.coll == Coll::Allgather,
    };
    coll && !s.check && (1..=s.shm_max).contains(&q.bytes) && area_wanted(q, s)
}

/// Whether a blocking call takes the tiny road: [`tiny_wanted`] and an area
/// with room, as it is: the tiny road never sets one up, and where it does
/// not go the call takes the general road, which makes the same
/// [`select`]ion. (A `v` form goes to the area whatever its size, so both
/// roads agree on it; room is for what this rank publishes, its header and
/// its `bytes`.)
#[cfg(test)]
pub(crate) fn tiny(q: &Query, s: &Settings) -> bool {
    tiny_wanted(q, s) && tiny_room(q, s)
}

/// The half of `tiny` that looks at the area, for a call whose
/// [`tiny_wanted`] is already known.
#[inline]
pub(crate) fn tiny_room(q: &Query, s: &Settings) -> bool {
    let room = match (q.vform, q.area) {
        (true, Area::Ready { slot, .. }) => q.bytes.saturating_add(HDR) <= slot,
        (true, Area::None) => false,
        // Not what the general road splits into chunks (a bcast or a
        // reduce of more than half a slot, an allreduce of more than seven
        // eighths).
        (false, Area::Ready { slot, .. }) => {
            in_one_slot(q) && !super::shm::tiny_splits(q.coll, slot - HDR, q.bytes)
        }
        (false, Area::None) => false,
    };
    // Not where the general road copies from the owners' memory (a
    // `coll_shm_copy_min` below the tiny sizes): ranks on either road
    // must publish the same contributions.
    let single_copy = matches!(
        q.area,
        Area::Ready {
            single_copy: true,
            ..
        }
    );
    room && !(single_copy && copies(q, s))
}

/// Whether a non-blocking call takes the non-blocking collectives' area
/// (`shm/nb.rs`): an `MPI_Iallreduce` of 1 byte to `coll_shm_max` on one
/// node, never with `coll_check` (whose exchange of arguments the road
/// does not make). The communicator must have that area, with room for the
/// contribution in one slot ([`nb_area_room`]): a non-blocking call never
/// sets one up, nor goes through it in chunks. Every rank answers alike
/// (size, op and area are the same on every rank of a correct program).
#[inline]
pub(crate) fn nb_area_wanted(q: &Query, s: &Settings) -> bool {
    q.form == Form::Nonblocking
        && q.coll == Coll::Allreduce
        && !q.vform
        && q.one_node
        && q.n >= 2
        && s.shm
        && !s.check
        && (1..=s.shm_max).contains(&q.bytes)
}

/// Whether the area of a call [`nb_area_wanted`] takes is set up, with
/// room for its contribution in one slot.
#[inline]
pub(crate) fn nb_area_room(q: &Query) -> bool {
    in_one_slot(q)
}

impl Algo {
    /// The algorithm's name, as `GMPI_LOG=coll=debug` prints it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Algo::Shm => "shared memory",
            Algo::ShmCopy => "shared memory, single copy (CMA)",
            Algo::Local => "local",
            Algo::Dissemination => "dissemination",
            Algo::BcastBinomial => "binomial tree",
            Algo::BcastScatterAllgather => "scatter + ring allgather",
            Algo::ReduceBinomial { rank_order: false } => "binomial tree",
            Algo::ReduceBinomial { rank_order: true } => "binomial tree in rank order",
            Algo::AllreduceRecursiveDoubling | Algo::ScanRecursiveDoubling => "recursive doubling",
            Algo::AllreduceRing => "ring (reduce-scatter + allgather)",
            Algo::GatherLinear | Algo::ScatterLinear => "linear",
            Algo::AllgatherBruck => "Bruck",
            Algo::AllgatherRing => "ring",
            Algo::AlltoallAtOnce => "all exchanges at once",
            Algo::AlltoallPairwise => "pairwise exchange",
            Algo::ReduceScatterRing => "ring reduce-scatter",
            Algo::ReduceScatterRankOrder => "reduce in rank order to rank 0, then scatter",
        }
    }
}

/// A choice as `GMPI_LOG=coll=debug` prints it: the algorithm, then the
/// sizes it was chosen by.
pub(crate) struct Said<'a>(pub &'a Query, pub Algo);

impl fmt::Display for Said<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Said(q, algo) = self;
        let (n, b) = (q.n, q.bytes);
        write!(f, "{}, ", algo.name())?;
        match q.coll {
            Coll::Barrier => write!(f, "{n} ranks"),
            Coll::Gather => write!(f, "{b} B from this rank over {n} ranks"),
            Coll::Scatter => write!(f, "{b} B to this rank over {n} ranks"),
            Coll::Alltoall => write!(f, "up to {b} B per peer over {n} ranks"),
            _ => write!(f, "{b} B over {n} ranks"),
        }?;
        if *algo == Algo::Shm && matches!(q.coll, Coll::Reduce | Coll::Allreduce) {
            write!(f, ", reduced in rank order")?;
        }
        if let (Algo::Shm, Area::Ready { slot, .. }) = (algo, q.area) {
            if area_bytes(q).saturating_add(HDR) > slot {
                write!(f, ", in chunks of {} B", slot - HDR)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Settings = Settings::DEFAULT;

    /// A query on one node, blocking, its area ready with the default slot
    /// (16 KiB of data).
    fn node(coll: Coll, n: i32, bytes: usize) -> Query {
        nodes(coll, n, bytes).one_node(true).area(Area::Ready {
            slot: D.shm_max + HDR,
            single_copy: false,
        })
    }

    /// A blocking query on several nodes (no area).
    fn nodes(coll: Coll, n: i32, bytes: usize) -> Query {
        Query::new(coll, Form::Blocking, n, bytes)
    }

    fn nonblocking(q: Query) -> Query {
        Query {
            form: Form::Nonblocking,
            ..q
        }
    }

    fn internal(q: Query) -> Query {
        Query {
            form: Form::Internal,
            ..q
        }
    }

    fn no_area(q: Query) -> Query {
        q.area(Area::None)
    }

    fn slot(q: Query, slot: usize) -> Query {
        q.area(Area::Ready {
            slot,
            single_copy: false,
        })
    }

    /// `q` with an area whose ranks can read each other by CMA.
    fn cma(q: Query) -> Query {
        match q.area {
            Area::Ready { slot, .. } => q.area(Area::Ready {
                slot,
                single_copy: true,
            }),
            Area::None => q,
        }
    }

    fn noncommutative(q: Query) -> Query {
        q.commutative(false)
    }

    fn unit(q: Query, unit: usize) -> Query {
        q.unit(unit)
    }

    fn in_place(q: Query) -> Query {
        q.in_place(true)
    }

    fn vform(q: Query) -> Query {
        q.vform(true)
    }

    fn with(s: Settings, f: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = s;
        f(&mut s);
        s
    }

    #[test]
    fn the_table() {
        use Algo::*;
        use Coll::*;
        let no_shm = with(D, |s| s.shm = false);
        let small_area = with(D, |s| s.shm_max = 1024);
        let check = with(D, |s| s.check = true);
        let big_bcast = with(D, |s| s.bcast_large = 1024);
        let no_pipeline = with(D, |s| s.shm_pipeline_max = 0);
        #[rustfmt::skip]
        let table: Vec<(&str, Query, Settings, Algo)> = vec![
            // barrier
            ("barrier, one node", node(Barrier, 4, 0), D, Shm),
            ("barrier, one node, no area yet", no_area(node(Barrier, 4, 0)), D, Dissemination),
            ("barrier, one node, coll_shm off", node(Barrier, 4, 0), no_shm, Dissemination),
            ("barrier, one rank", node(Barrier, 1, 0), D, Dissemination),
            ("barrier, several nodes", nodes(Barrier, 4, 0), D, Dissemination),
            ("ibarrier", nonblocking(node(Barrier, 4, 0)), D, Dissemination),
            ("finalize's barrier", internal(node(Barrier, 4, 0)), D, Dissemination),
            ("barrier, slot smaller than a header", slot(node(Barrier, 4, 0), HDR - 1), D, Dissemination),
            ("barrier, slot of just a header", slot(node(Barrier, 4, 0), HDR), D, Shm),
            // bcast
            ("bcast 8 B, one node", node(Bcast, 4, 8), D, Shm),
            ("bcast 0 B, one node", node(Bcast, 4, 0), D, Shm),
            ("bcast at coll_shm_max", node(Bcast, 4, 16 * KIB), D, Shm),
            ("bcast above coll_shm_max: in chunks", node(Bcast, 4, 16 * KIB + 1), D, Shm),
            ("bcast at coll_shm_pipeline_max", node(Bcast, 4, D.shm_pipeline_max), D, Shm),
            ("bcast above coll_shm_pipeline_max", node(Bcast, 2, D.shm_pipeline_max + 1), D, BcastBinomial),
            ("bcast above coll_shm_max, no pipelining", node(Bcast, 4, 16 * KIB + 1), no_pipeline, BcastBinomial),
            ("bcast, smaller coll_shm_max", node(Bcast, 4, 1025), small_area, Shm),
            ("bcast, slot too small: in chunks", slot(node(Bcast, 4, 100), 100 + HDR - 1), D, Shm),
            ("bcast, slot of a header", slot(node(Bcast, 4, 100), HDR), D, BcastBinomial),
            ("bcast, slot just big enough", slot(node(Bcast, 4, 100), 100 + HDR), D, Shm),
            // No memory kind is asked: a device buffer takes the area as a host one does.
            ("bcast, device buffer", node(Bcast, 4, 8), D, Shm),
            ("ibcast 8 B", nonblocking(node(Bcast, 4, 8)), D, BcastBinomial),
            ("bcast 8 B, several nodes", nodes(Bcast, 4, 8), D, BcastBinomial),
            ("bcast 0 B, several nodes", nodes(Bcast, 4, 0), D, Local),
            ("bcast, one rank", nodes(Bcast, 1, 8), D, Local),
            ("bcast below bcast_large", nodes(Bcast, 4, 128 * KIB - 1), D, BcastBinomial),
            ("bcast at bcast_large", nodes(Bcast, 4, 128 * KIB), D, BcastScatterAllgather),
            ("bcast at bcast_large, 3 ranks", nodes(Bcast, 3, 128 * KIB), D, BcastScatterAllgather),
            ("bcast at bcast_large, 2 ranks", nodes(Bcast, 2, 128 * KIB), D, BcastBinomial),
            ("bcast, smaller bcast_large", nodes(Bcast, 4, 1024), big_bcast, BcastScatterAllgather),
            ("large bcast, one node, past coll_shm_pipeline_max", node(Bcast, 8, MIB), with(D, |s| s.shm_pipeline_max = 64 * KIB), BcastScatterAllgather),
            ("large bcast, one node: in chunks", node(Bcast, 8, MIB), D, Shm),
            // reduce
            ("reduce 8 B, one node", node(Reduce, 4, 8), D, Shm),
            ("reduce, non-commutative, one node", noncommutative(node(Reduce, 4, 8)), D, Shm),
            ("reduce in place, one node", in_place(node(Reduce, 4, 8)), D, Shm),
            ("reduce above coll_shm_max: in chunks", node(Reduce, 4, 16 * KIB + 1), D, Shm),
            ("reduce above coll_shm_pipeline_max", node(Reduce, 4, D.shm_pipeline_max + 1), D, ReduceBinomial { rank_order: false }),
            ("reduce in chunks, element too big for a slot", unit(node(Reduce, 4, 64 * KIB), 32 * KIB), D, ReduceBinomial { rank_order: false }),
            ("reduce in chunks, an element per slot", unit(node(Reduce, 4, 64 * KIB), 16 * KIB), D, Shm),
            ("ireduce", nonblocking(node(Reduce, 4, 8)), D, ReduceBinomial { rank_order: false }),
            ("reduce, several nodes", nodes(Reduce, 4, 8), D, ReduceBinomial { rank_order: false }),
            ("reduce, non-commutative", noncommutative(nodes(Reduce, 4, 8)), D, ReduceBinomial { rank_order: true }),
            ("reduce, one rank", nodes(Reduce, 1, 8), D, Local),
            ("reduce, device buffers", node(Reduce, 4, 8), D, Shm),
            // allreduce
            ("allreduce 8 B, one node", node(Allreduce, 4, 8), D, Shm),
            ("allreduce at coll_shm_max", node(Allreduce, 4, 16 * KIB), D, Shm),
            ("allreduce above coll_shm_max: in chunks", node(Allreduce, 4, 16 * KIB + 1), D, Shm),
            ("allreduce above coll_shm_pipeline_max", node(Allreduce, 4, D.shm_pipeline_max + 1), D, AllreduceRing),
            ("allreduce above coll_shm_max, no pipelining", node(Allreduce, 4, 16 * KIB + 1), no_pipeline, AllreduceRecursiveDoubling),
            ("iallreduce above coll_shm_max", nonblocking(node(Allreduce, 4, 16 * KIB + 1)), D, AllreduceRecursiveDoubling),
            ("allreduce, coll_shm off", node(Allreduce, 4, 8), no_shm, AllreduceRecursiveDoubling),
            ("allreduce, coll_check", node(Allreduce, 4, 8), check, Shm),
            ("iallreduce 8 B", nonblocking(node(Allreduce, 4, 8)), D, AllreduceRecursiveDoubling),
            ("context-id agreement", internal(node(Allreduce, 4, 4)), D, AllreduceRecursiveDoubling),
            ("allreduce 8 B, several nodes", nodes(Allreduce, 4, 8), D, AllreduceRecursiveDoubling),
            ("allreduce 0 B", nodes(Allreduce, 4, 0), D, Local),
            ("allreduce, one rank", nodes(Allreduce, 1, 8), D, Local),
            ("allreduce below allreduce_large", nodes(Allreduce, 4, 64 * KIB - 1), D, AllreduceRecursiveDoubling),
            ("allreduce at allreduce_large", nodes(Allreduce, 4, 64 * KIB), D, AllreduceRing),
            ("allreduce at allreduce_large, 2 ranks", nodes(Allreduce, 2, 64 * KIB), D, AllreduceRing),
            ("allreduce large, non-commutative", noncommutative(nodes(Allreduce, 4, 64 * KIB)), D, AllreduceRecursiveDoubling),
            ("allreduce large, an element per rank", unit(nodes(Allreduce, 4, 64 * KIB), 16 * KIB), D, AllreduceRing),
            ("allreduce large, fewer elements than ranks", unit(nodes(Allreduce, 5, 64 * KIB), 16 * KIB), D, AllreduceRecursiveDoubling),
            ("large allreduce in place", in_place(nodes(Allreduce, 4, MIB)), D, AllreduceRing),
            // gather
            ("gather 8 B, one node", node(Gather, 4, 8), D, Shm),
            ("gather in place, one node", in_place(node(Gather, 4, 8)), D, Shm),
            ("gatherv, one node", vform(node(Gather, 4, 8)), D, Shm),
            ("gatherv, one node, any size", vform(node(Gather, 4, MIB)), D, Shm),
            ("gatherv, several nodes", vform(nodes(Gather, 4, 8)), D, GatherLinear),
            ("gatherv, nonblocking", nonblocking(vform(node(Gather, 4, 8))), D, GatherLinear),
            ("gather above coll_shm_max", node(Gather, 4, 16 * KIB + 1), D, GatherLinear),
            ("igather", nonblocking(node(Gather, 4, 8)), D, GatherLinear),
            ("gather, several nodes", nodes(Gather, 4, 8), D, GatherLinear),
            ("gather, one rank", nodes(Gather, 1, 8), D, GatherLinear),
            // scatter: no shared-memory path
            ("scatter 8 B, one node", node(Scatter, 4, 8), D, Shm),
            ("scatter, one node, n blocks above coll_shm_max", node(Scatter, 4, 4 * KIB + 1), D, ScatterLinear),
            ("scatterv, one node, any size", vform(node(Scatter, 4, MIB)), D, Shm),
            ("scatterv, coll_shm off", vform(node(Scatter, 4, 8)), with(D, |s| s.shm = false), ScatterLinear),
            ("scatter, several nodes", nodes(Scatter, 4, MIB), D, ScatterLinear),
            // allgather (bytes: the whole result)
            ("allgather 4 × 8 B, one node", node(Allgather, 4, 32), D, Shm),
            ("allgather, 16 KiB per rank, one node", node(Allgather, 4, 64 * KIB), D, Shm),
            ("allgather, 16 KiB + 4 per rank, one node: in chunks", node(Allgather, 4, 64 * KIB + 16), D, Shm),
            ("allgather, at coll_shm_pipeline_max per rank", node(Allgather, 4, 4 * D.shm_pipeline_max), D, Shm),
            ("allgather, above coll_shm_pipeline_max per rank", node(Allgather, 4, 4 * D.shm_pipeline_max + 16), D, AllgatherRing),
            ("allgather above a slot, no pipelining", node(Allgather, 4, 64 * KIB + 16), no_pipeline, AllgatherRing),
            ("allgather in place, one node", in_place(node(Allgather, 4, 32)), D, AllgatherBruck),
            ("allgatherv, one node", vform(node(Allgather, 4, 32)), D, Shm),
            ("allgatherv, one node, above coll_shm_max", vform(node(Allgather, 4, 16 * KIB + 1)), D, AllgatherRing),
            ("iallgather", nonblocking(node(Allgather, 4, 32)), D, AllgatherBruck),
            ("coll_check's exchange", internal(node(Allgather, 4, 64)), D, AllgatherBruck),
            ("allgather below allgather_large", nodes(Allgather, 4, 64 * KIB - 1), D, AllgatherBruck),
            ("allgather at allgather_large", nodes(Allgather, 4, 64 * KIB), D, AllgatherRing),
            ("allgatherv, small", vform(nodes(Allgather, 4, 32)), D, AllgatherRing),
            ("allgather, one rank", nodes(Allgather, 1, 8), D, AllgatherRing),
            // alltoall (bytes: per peer)
            ("alltoall 8 B per peer, one node", node(Alltoall, 4, 8), D, Shm),
            ("alltoall in place, one node", in_place(node(Alltoall, 4, 8)), D, Shm),
            ("alltoall, 16 KiB in all, one node", node(Alltoall, 4, 4 * KIB), D, Shm),
            ("alltoall, 16 KiB + 4 in all, one node", node(Alltoall, 4, 4 * KIB + 1), D, AlltoallAtOnce),
            ("alltoallv, one node", vform(node(Alltoall, 4, 8)), D, Shm),
            ("alltoallv, one node, any size", vform(node(Alltoall, 4, MIB)), D, Shm),
            ("alltoallv, several nodes", vform(nodes(Alltoall, 4, 8)), D, AlltoallAtOnce),
            ("ialltoall", nonblocking(node(Alltoall, 4, 8)), D, AlltoallAtOnce),
            ("alltoall below alltoall_large", nodes(Alltoall, 4, 8 * KIB - 1), D, AlltoallAtOnce),
            ("alltoall at alltoall_large", nodes(Alltoall, 4, 8 * KIB), D, AlltoallPairwise),
            ("alltoallv at alltoall_large", vform(nodes(Alltoall, 4, 8 * KIB)), D, AlltoallPairwise),
            ("alltoall at alltoall_large, one rank", nodes(Alltoall, 1, 8 * KIB), D, AlltoallPairwise),
            // reduce_scatter: no shared-memory path
            ("reduce_scatter, one node", node(ReduceScatter, 4, 32), D, Shm),
            ("reduce_scatter, one node, above coll_shm_max: in chunks", node(ReduceScatter, 4, 16 * KIB + 1), D, Shm),
            ("reduce_scatter above coll_shm_pipeline_max", node(ReduceScatter, 4, D.shm_pipeline_max + 1), D, ReduceScatterRing),
            ("reduce_scatter in chunks, units too big for a slot", unit(node(ReduceScatter, 4, 64 * KIB), 8 * KIB), D, ReduceScatterRing),
            ("reduce_scatter in chunks, a unit of each other block per slot", unit(node(ReduceScatter, 4, 64 * KIB), 4 * KIB), D, Shm),
            ("reduce_scatter, non-commutative, in chunks", noncommutative(node(ReduceScatter, 4, 64 * KIB)), D, Shm),
            ("reduce_scatter, several nodes", nodes(ReduceScatter, 4, 32), D, ReduceScatterRing),
            ("reduce_scatter, non-commutative", noncommutative(nodes(ReduceScatter, 4, 32)), D, ReduceScatterRankOrder),
            ("reduce_scatter, one rank", nodes(ReduceScatter, 1, 32), D, Local),
            // scan: no shared-memory path
            ("scan, one node", node(Scan, 4, 8), D, ScanRecursiveDoubling),
            ("scan, one rank", nodes(Scan, 1, 8), D, Local),
        ];
        for (what, q, s, want) in table {
            assert_eq!(select(&q, &s), want, "{what}: {q:?}");
            // The area is looked at (and set up) only where it may be used.
            if want == Shm {
                assert!(area_wanted(&q, &s), "{what}");
            }
            if !area_wanted(&q, &s) {
                assert_eq!(select(&no_area(q), &s), want, "{what}, area not looked at");
            }
        }
    }

    #[test]
    fn single_copy_road() {
        use Algo::*;
        use Coll::*;
        let min = D.shm_copy_min;
        // A pipeline limit below COPY_ROOTED_MAX, where rooted calls copy.
        let lp = with(D, |s| s.shm_pipeline_max = 64 * KIB);
        #[rustfmt::skip]
        let table: Vec<(&str, Query, Settings, Algo)> = vec![
            ("bcast at coll_shm_copy_min: in chunks", cma(node(Bcast, 4, min)), D, Shm),
            ("bcast at coll_shm_pipeline_max: in chunks", cma(node(Bcast, 4, D.shm_pipeline_max)), D, Shm),
            ("bcast above a lower one", cma(node(Bcast, 4, 64 * KIB + 1)), lp, ShmCopy),
            ("bcast above coll_shm_max, no pipelining", cma(node(Bcast, 4, min + 1)), with(D, |s| s.shm_pipeline_max = 0), ShmCopy),
            ("bcast below coll_shm_copy_min, no pipelining", cma(node(Bcast, 4, min - 1)), with(D, |s| { s.shm_pipeline_max = 0; s.shm_max = 64 }), BcastBinomial),
            ("bcast above it, no CMA", node(Bcast, 4, 64 * KIB + 1), lp, BcastBinomial),
            ("bcast just below COPY_ROOTED_MAX", cma(node(Bcast, 4, COPY_ROOTED_MAX - 1)), lp, ShmCopy),
            ("bcast at COPY_ROOTED_MAX", cma(node(Bcast, 4, COPY_ROOTED_MAX)), lp, BcastScatterAllgather),
            ("bcast with coll_check", cma(node(Bcast, 4, 64 * KIB + 1)), with(lp, |s| s.check = true), ShmCopy),
            ("bcast on several nodes", nodes(Bcast, 4, min), D, BcastBinomial),
            ("a nonblocking bcast", cma(nonblocking(node(Bcast, 4, 64 * KIB + 1))), lp, BcastBinomial),
            ("gather of a slot", cma(node(Gather, 4, min)), D, Shm),
            ("gather above a slot", cma(node(Gather, 4, min + 1)), D, ShmCopy),
            ("gather at COPY_ROOTED_MAX", cma(node(Gather, 4, COPY_ROOTED_MAX)), D, GatherLinear),
            ("gatherv", cma(vform(node(Gather, 4, min))), D, Shm),
            ("scatter at coll_shm_copy_min", cma(node(Scatter, 4, min)), D, ShmCopy),
            ("scatter of 4 MiB", cma(node(Scatter, 4, 4 << 20)), D, ShmCopy),
            ("scatter below it", cma(node(Scatter, 2, min - 1)), D, ScatterLinear),
            ("scatter whose blocks fit a slot", cma(node(Scatter, 2, min / 2)), D, Shm),
            ("allgather in chunks", cma(node(Allgather, 4, 4 * D.shm_pipeline_max)), D, Shm),
            ("allgather above", cma(node(Allgather, 4, 4 * (64 * KIB + 1))), lp, ShmCopy),
            ("allgather of half of it per rank, no pipelining", cma(node(Allgather, 4, 4 * (min / 2))), with(D, |s| { s.shm_pipeline_max = 0; s.shm_max = 64 }), ShmCopy),
            ("allgather below it, no pipelining", cma(node(Allgather, 4, 4 * (min / 2 - 1))), with(D, |s| { s.shm_pipeline_max = 0; s.shm_max = 64 }), AllgatherBruck),
            ("allgather of 4 MiB per rank: in chunks", cma(node(Allgather, 4, 16 << 20)), D, Shm),
            ("allgather of 4 MiB per rank, a lower limit", cma(node(Allgather, 4, 16 << 20)), lp, ShmCopy),
            ("allgather in place", cma(in_place(node(Allgather, 4, 4 * min))), D, AllgatherRing),
            ("alltoall of half of it per peer: in a slot", cma(node(Alltoall, 2, min / 2)), D, Shm),
            ("alltoall of half of it per peer at np 4", cma(node(Alltoall, 4, min / 2)), D, AlltoallPairwise),
            ("alltoall of it per peer", cma(node(Alltoall, 4, min)), D, ShmCopy),
            ("alltoall in place", cma(in_place(node(Alltoall, 2, min))), D, AlltoallPairwise),
            ("alltoallv", cma(vform(node(Alltoall, 2, min))), D, Shm),
            ("allgatherv of half of it per rank", cma(vform(node(Allgather, 4, 4 * (min / 2)))), D, ShmCopy),
            ("allgatherv below, in one slot", cma(vform(node(Allgather, 2, 2 * (min / 2 - 1)))), D, Shm),
            ("allgatherv below, above a slot", cma(vform(node(Allgather, 4, 4 * (min / 2 - 1)))), D, AllgatherRing),
            ("allgatherv of 1 MiB, no CMA", vform(node(Allgather, 4, 1 << 20)), D, AllgatherRing),
            ("allreduce", cma(node(Allreduce, 2, min)), D, Shm),
            ("reduce above coll_shm_pipeline_max", cma(node(Reduce, 2, D.shm_pipeline_max + 1)), D, ReduceBinomial { rank_order: false }),
            ("coll_shm_copy_min raised", cma(node(Bcast, 4, 4 * min + 1)), with(lp, |s| s.shm_copy_min = 8 * min), BcastBinomial),
        ];
        for (what, q, s, want) in table {
            assert_eq!(select(&q, &s), want, "{what}");
            if want == ShmCopy {
                assert!(area_wanted(&no_area(q), &s), "{what}");
            }
        }
    }

    #[test]
    fn area_is_wanted_before_it_is_set_up() {
        let q = no_area(node(Coll::Bcast, 4, 8));
        assert!(area_wanted(&q, &D));
        assert_eq!(select(&q, &D), Algo::BcastBinomial);
        assert!(!area_wanted(&nonblocking(q), &D));
        assert!(!area_wanted(&nodes(Coll::Bcast, 4, 8), &D));
        assert!(area_wanted(&node(Coll::Scatter, 4, 8), &D));
        assert!(area_wanted(&vform(node(Coll::Scatter, 4, 8)), &D));
        assert!(!area_wanted(&vform(nodes(Coll::Scatter, 4, 8)), &D));
    }

    #[test]
    fn tiny_road() {
        let check = with(D, |s| s.check = true);
        let q = |bytes| node(Coll::Allreduce, 4, bytes);
        #[rustfmt::skip]
        let table: Vec<(&str, Query, Settings, bool)> = vec![
            ("8 B", q(8), D, true),
            ("1 B", q(1), D, true),
            ("TINY bytes", q(TINY), D, true),
            ("TINY + 1 bytes (the road itself takes only buffers apart)", q(TINY + 1), D, true),
            ("seven eighths of a slot", q(D.shm_max / 8 * 7), D, true),
            ("more than seven eighths of a slot: in chunks", q(D.shm_max / 8 * 7 + 1), D, false),
            ("0 B", q(0), D, false),
            ("in place", in_place(q(8)), D, true),
            ("no area yet", no_area(q(8)), D, false),
            ("coll_check", q(8), check, false),
            ("coll_shm off", q(8), with(D, |s| s.shm = false), false),
            ("coll_shm_max below: the general road", q(8), with(D, |s| s.shm_max = 4), false),
            ("coll_shm_max below, no pipelining", q(8), with(D, |s| { s.shm_max = 4; s.shm_pipeline_max = 0 }), false),
            ("slot too small", slot(q(8), 8 + HDR - 1), D, false),
            ("several nodes", nodes(Coll::Allreduce, 4, 8), D, false),
            ("one rank", node(Coll::Allreduce, 1, 8), D, false),
            ("a reduce", node(Coll::Reduce, 4, 8), D, true),
            ("a bcast", node(Coll::Bcast, 4, 8), D, true),
            ("a bcast of TINY + 1 bytes", node(Coll::Bcast, 4, TINY + 1), D, true),
            ("a bcast of half a slot", node(Coll::Bcast, 4, D.shm_max / 2), D, true),
            ("a bcast of more than half a slot: in chunks", node(Coll::Bcast, 4, D.shm_max / 2 + 1), D, false),
            ("a reduce of half a slot", node(Coll::Reduce, 4, D.shm_max / 2), D, true),
            ("a reduce of more than half a slot: in chunks", node(Coll::Reduce, 4, D.shm_max / 2 + 1), D, false),
            ("a gather of a slot", node(Coll::Gather, 4, D.shm_max), D, true),
            ("a gather above a slot", node(Coll::Gather, 4, D.shm_max + 1), D, false),
            ("a scatter of a slot in all", node(Coll::Scatter, 4, D.shm_max / 4), D, true),
            ("a scatter of more than a slot in all", node(Coll::Scatter, 4, D.shm_max / 4 + 1), D, false),
            ("a bcast with coll_check", node(Coll::Bcast, 4, 8), check, false),
            ("a reduce on several nodes", nodes(Coll::Reduce, 4, 8), D, false),
            ("a nonblocking reduce", nonblocking(node(Coll::Reduce, 4, 8)), D, false),
            ("an allgather", node(Coll::Allgather, 4, 8), D, true),
            ("an allgather of a slot in all", node(Coll::Allgather, 4, D.shm_max), D, true),
            ("an allgather of more than a slot in all", node(Coll::Allgather, 4, D.shm_max + 4), D, false),
            ("an allgather in place", in_place(node(Coll::Allgather, 4, 8)), D, false),
            ("an allgather with coll_check", node(Coll::Allgather, 4, 8), check, false),
            ("an alltoall", node(Coll::Alltoall, 4, 8), D, true),
            ("an alltoall whose send buffer fills no slot", slot(node(Coll::Alltoall, 4, 8), 4 * 8 + HDR - 1), D, false),
            ("a reduce_scatter", node(Coll::ReduceScatter, 4, 32), D, true),
            ("a reduce_scatter of a slot", node(Coll::ReduceScatter, 4, D.shm_max), D, true),
            ("a reduce_scatter above a slot", node(Coll::ReduceScatter, 4, D.shm_max + 4), D, false),
            ("a nonblocking allgather", nonblocking(node(Coll::Allgather, 4, 8)), D, false),
            ("a gather", node(Coll::Gather, 4, 8), D, true),
            ("a gatherv", vform(node(Coll::Gather, 4, 8)), D, true),
            ("a scatterv", vform(node(Coll::Scatter, 4, 8)), D, true),
            ("a gatherv whose own block fills no slot", slot(vform(node(Coll::Gather, 4, 8)), 8 + HDR - 1), D, false),
            ("a gatherv of TINY + 1 bytes", vform(node(Coll::Gather, 4, TINY + 1)), D, true),
            ("a gatherv of a slot", vform(node(Coll::Gather, 4, D.shm_max)), D, true),
            ("a gatherv above a slot", vform(node(Coll::Gather, 4, D.shm_max + 1)), D, false),
            ("a scatterv of TINY + 1 bytes", vform(node(Coll::Scatter, 4, TINY + 1)), D, true),
            ("a scatterv of a slot", vform(node(Coll::Scatter, 4, D.shm_max)), D, true),
            ("a scatterv above a slot", vform(node(Coll::Scatter, 4, D.shm_max + 1)), D, false),
            ("a gatherv with coll_check", vform(node(Coll::Gather, 4, 8)), check, false),
            ("a gatherv on several nodes", vform(nodes(Coll::Gather, 4, 8)), D, false),
            ("an alltoallv", vform(node(Coll::Alltoall, 4, 8)), D, true),
            ("an alltoallv of TINY + 1 bytes", vform(node(Coll::Alltoall, 4, TINY + 1)), D, true),
            ("an alltoallv above a slot", vform(node(Coll::Alltoall, 4, D.shm_max + 1)), D, false),
            ("an alltoallv with coll_check", vform(node(Coll::Alltoall, 4, 8)), check, false),
            ("an allgatherv", vform(node(Coll::Allgather, 4, 8)), D, true),
            ("an allgatherv of TINY + 1 bytes in all", vform(node(Coll::Allgather, 4, TINY + 1)), D, true),
            ("an allgatherv in place", in_place(vform(node(Coll::Allgather, 4, 8))), D, false),
            ("an allgatherv whose result fills no slot", slot(vform(node(Coll::Allgather, 4, 8)), 8 + HDR - 1), D, false),
            ("an allgatherv on several nodes", vform(nodes(Coll::Allgather, 4, 8)), D, false),
            ("an allgatherv of a slot", vform(node(Coll::Allgather, 4, D.shm_max)), D, true),
            ("an allgatherv above a slot", vform(node(Coll::Allgather, 4, D.shm_max + 1)), D, false),
            ("an alltoallv of a slot", vform(node(Coll::Alltoall, 4, D.shm_max)), D, true),
            ("an allgatherv of a slot, CMA", cma(vform(node(Coll::Allgather, 2, D.shm_max))), D, true),
            ("a gather, coll_shm_copy_min below it, CMA", cma(node(Coll::Gather, 2, 64)), with(D, |s| s.shm_copy_min = 64), true),
            ("a scatter", node(Coll::Scatter, 4, 8), D, true),
            ("a scatter whose blocks fill no slot", slot(node(Coll::Scatter, 4, 8), 4 * 8 + HDR - 1), D, false),
        ];
        for (what, q, s, want) in table {
            assert_eq!(tiny(&q, &s), want, "{what}");
            // The road's gate never refuses what it takes, and the road only
            // takes what the general road would send through the area.
            if want {
                assert!(tiny_wanted(&no_area(q), &s), "{what}");
                assert_eq!(select(&q, &s), Algo::Shm, "{what}");
            }
        }
    }

    /// The non-blocking road of a small iallreduce: wanted for every
    /// iallreduce on one node up to a slot, taken only once the area is
    /// set up with room.
    #[test]
    fn nonblocking_area_road() {
        let check = with(D, |s| s.check = true);
        let no_shm = with(D, |s| s.shm = false);
        let table = [
            (
                "an iallreduce",
                nonblocking(node(Coll::Allreduce, 4, 8)),
                D,
                true,
            ),
            (
                "an iallreduce of a slot",
                nonblocking(node(Coll::Allreduce, 4, D.shm_max)),
                D,
                true,
            ),
            (
                "an iallreduce above a slot",
                nonblocking(node(Coll::Allreduce, 4, D.shm_max + 1)),
                D,
                false,
            ),
            (
                "an empty iallreduce",
                nonblocking(node(Coll::Allreduce, 4, 0)),
                D,
                false,
            ),
            (
                "an iallreduce with coll_check",
                nonblocking(node(Coll::Allreduce, 4, 8)),
                check,
                false,
            ),
            (
                "an iallreduce without the area",
                nonblocking(node(Coll::Allreduce, 4, 8)),
                no_shm,
                false,
            ),
            (
                "an iallreduce on several nodes",
                nonblocking(nodes(Coll::Allreduce, 4, 8)),
                D,
                false,
            ),
            (
                "an iallreduce of one rank",
                nonblocking(node(Coll::Allreduce, 1, 8)),
                D,
                false,
            ),
            (
                "a blocking allreduce",
                node(Coll::Allreduce, 4, 8),
                D,
                false,
            ),
            ("an ibcast", nonblocking(node(Coll::Bcast, 4, 8)), D, false),
        ];
        for (what, q, s, want) in table {
            assert_eq!(
                nb_area_wanted(&no_area(q), &s) && nb_area_room(&q),
                want,
                "{what}"
            );
        }
        let q = nonblocking(node(Coll::Allreduce, 4, 8));
        assert!(!nb_area_room(&no_area(q)), "no area set up");
        assert!(!nb_area_room(&slot(q, 8 + HDR - 1)), "no room");
        assert!(nb_area_room(&slot(q, 8 + HDR)), "room");
    }

    #[test]
    fn settings_of_the_configuration() {
        let cfg = crate::config::Config::default();
        assert_eq!(Settings::of(&cfg), D);
        let cfg = crate::config::Config {
            coll_shm: false,
            coll_shm_max: Some(1),
            coll_shm_pipeline_max: Some(6),
            coll_shm_copy_min: Some(7),
            coll_check: true,
            bcast_large: Some(2),
            allreduce_large: Some(3),
            allgather_large: Some(4),
            alltoall_large: Some(5),
            ..cfg
        };
        let s = Settings::of(&cfg);
        assert_eq!(
            s,
            Settings {
                shm: false,
                shm_max: 1,
                shm_pipeline_max: 6,
                shm_copy_min: 7,
                check: true,
                bcast_large: 2,
                allreduce_large: 3,
                allgather_large: 4,
                alltoall_large: 5,
            }
        );
    }

    #[test]
    fn choices_are_named() {
        let q = nodes(Coll::Alltoall, 4, 8);
        assert_eq!(
            Said(&q, select(&q, &D)).to_string(),
            "all exchanges at once, up to 8 B per peer over 4 ranks"
        );
        let q = node(Coll::Allreduce, 4, 8);
        assert_eq!(
            Said(&q, select(&q, &D)).to_string(),
            "shared memory, 8 B over 4 ranks, reduced in rank order"
        );
        let q = nodes(Coll::Barrier, 4, 0);
        assert_eq!(
            Said(&q, select(&q, &D)).to_string(),
            "dissemination, 4 ranks"
        );
        let q = node(Coll::Bcast, 2, 40 * KIB);
        assert_eq!(
            Said(&q, select(&q, &D)).to_string(),
            "shared memory, 40960 B over 2 ranks, in chunks of 16384 B"
        );
    }
}
