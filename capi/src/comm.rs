//! Communicators and groups: rank and size, duplicating (attributes copied
//! through their keyvals' copy callbacks, the error handler and the
//! topology with them), splitting, creating from groups (`MPI_Comm_create`
//! over the whole parent, `MPI_Comm_create_group` over the group only),
//! freeing (attributes deleted first), comparing, names, info hints,
//! intercommunicators (`MPI_Intercomm_create`, `_merge`, and
//! `MPI_Intercomm_create_from_groups`, whose errors go to the handler it is
//! given) and their queries, and every group constructor and query.
//! Attributes themselves are in `attrs.rs` (entry points) and `cache.rs`
//! (the copying and deleting that dup and free run).
//!
//! Every new communicator inherits its parent's error handler; only
//! `MPI_Comm_dup` (and `idup`, `dup_with_info`) copy attributes and the
//! topology. A new communicator has an empty name.

use std::ffi::{c_char, c_int};

use gmpi::{Communicator, Comparison, Error, ErrorClass, Group};

use crate::abi::*;
use crate::cache;
use crate::errors;
use crate::frame;
use crate::ptr;
use crate::resolve;
use crate::tables::*;

/// The value of a comparison result in the MPICH ABI.
fn cmp_value(c: Comparison) -> c_int {
    match c {
        Comparison::Ident => MPI_IDENT,
        Comparison::Congruent => MPI_CONGRUENT,
        Comparison::Similar => MPI_SIMILAR,
        Comparison::Unequal => MPI_UNEQUAL,
    }
}

/// Register `c`, made from `parent`: it inherits the parent's error handler.
fn register_child(parent: MPI_Comm, c: Communicator) -> MPI_Comm {
    let errh = errors::errhandler_of(parent);
    let mut o = CommObj::new(c, String::new());
    o.errh = errh;
    new_comm(o)
}

/// Register `c` if any, the handle for `*out` (`MPI_COMM_NULL` for none).
fn register_opt(parent: MPI_Comm, c: Option<Communicator>) -> MPI_Comm {
    c.map_or(MPI_COMM_NULL, |c| register_child(parent, c))
}

/// `MPI_Intercomm_create_from_groups`: over the world communicator (every
/// process of a gmpi job is in it); `stringtag` is hashed into the tag that
/// tells concurrent calls apart. The new communicator gets `errhandler`.
#[allow(clippy::too_many_arguments)]
fn intercomm_from_groups(
    call: &str,
    local_group: MPI_Group,
    local_leader: c_int,
    remote_group: MPI_Group,
    remote_leader: c_int,
    stringtag: *const c_char,
    info: MPI_Info,
    errhandler: MPI_Errhandler,
    newintercomm: *mut MPI_Comm,
) -> Result<(), Error> {
    let lg = grp(call, "local_group", local_group)?;
    let rg = grp(call, "remote_group", remote_group)?;
    let tag = ptr::cstr(call, "stringtag", stringtag)?;
    if info != MPI_INFO_NULL {
        info_entries(call, info)?;
    }
    errors::check_errhandler(call, errhandler)?;
    need(call, "newintercomm", newintercomm)?;
    // FNV-1a of the string tag, as a non-negative MPI tag.
    let h = tag.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    let world = resolve::comm(call, MPI_COMM_WORLD)?;
    let n = world.intercomm_from_groups(
        &lg,
        local_leader,
        &rg,
        remote_leader,
        (h & 0x3fff_ffff) as i32,
    )?;
    let mut o = CommObj::new(n, String::new());
    o.errh = errhandler;
    ptr::write(call, "newintercomm", newintercomm, new_comm(o))
}

/// `MPI_ERR_COMM` for a call that needs an intercommunicator.
fn not_inter(call: &str) -> Error {
    err(ErrorClass::Comm, call, "comm is not an intercommunicator")
}

/// Fail if an out-parameter is NULL (checked before a collective starts).
fn need<T>(call: &str, what: &str, p: *mut T) -> Result<(), Error> {
    if p.is_null() {
        Err(err(ErrorClass::Arg, call, format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// Check an info handle (`MPI_INFO_NULL` allowed); the entries it holds.
fn info_entries(call: &str, info: MPI_Info) -> Result<Vec<(String, String)>, Error> {
    if info == MPI_INFO_NULL || info == MPI_INFO_ENV {
        return Ok(Vec::new());
    }
    decode(Kind::Info, info)
        .and_then(|i| state().infos.get(i).map(|o| o.entries.clone()))
        .ok_or_else(|| {
            err(
                ErrorClass::Info,
                call,
                format!("info = {info:#x} is not a valid info object"),
            )
        })
}

/// Remove the C-side record of communicator `h` and free it in the runtime.
fn drop_comm(h: MPI_Comm, c: &Communicator) {
    let _ = c.free();
    if let Some(i) = decode(Kind::Comm, h) {
        state().comms.remove(i);
    }
}

/// `MPI_Comm_dup`: a new communicator over the same group with the
/// attributes (through their copy callbacks), error handler and topology of
/// `comm`.
fn dup(call: &str, comm: MPI_Comm, newcomm: *mut MPI_Comm) -> Result<MPI_Comm, Error> {
    let c = resolve::comm(call, comm)?;
    need(call, "newcomm", newcomm)?;
    let d = c.dup()?;
    let (errh, topo) = resolve::with_comm(call, comm, |o| (o.errh, o.topo.clone()))?;
    let mut o = CommObj::new(d.clone(), String::new());
    o.errh = errh;
    // The copy gets its own private communicator for neighbourhood traffic.
    o.topo = topo.map(|t| t.dup_for(&d)).transpose()?;
    let h = new_comm(o);
    if let Err(e) = cache::copy_comm_attrs(call, comm, h) {
        drop_comm(h, &d);
        return Err(e);
    }
    ptr::write(call, "newcomm", newcomm, h)?;
    Ok(h)
}

/// Which split `MPI_Comm_split_type` does on this rank: `None` for
/// `MPI_UNDEFINED` (or a hardware type gmpi cannot honour), `Some(strict)`
/// for the node split, `strict` if the result must be a strict subset.
fn split_kind(call: &str, split_type: c_int, info: MPI_Info) -> Result<Option<bool>, Error> {
    let entries = info_entries(call, info)?;
    Ok(match split_type {
        MPI_UNDEFINED => None,
        MPI_COMM_TYPE_SHARED => Some(false),
        // MPI-4 §7.4.2: "mpi_shared_memory" must give the SHARED split; any
        // other or no resource type gives MPI_COMM_NULL.
        // MPI 4.1's resource-guided split takes the same info key.
        MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => entries
            .iter()
            .any(|(k, v)| k == "mpi_hw_resource_type" && v == "mpi_shared_memory")
            .then_some(false),
        // A hardware level strictly below the parent: the node, unless the
        // parent fits on one node (then MPI_COMM_NULL).
        MPI_COMM_TYPE_HW_UNGUIDED => Some(true),
        t => {
            return Err(err(
                ErrorClass::Arg,
                call,
                format!(
                    "split_type = {t} is not MPI_COMM_TYPE_SHARED, MPI_COMM_TYPE_HW_GUIDED, \
                     MPI_COMM_TYPE_HW_UNGUIDED, MPI_COMM_TYPE_RESOURCE_GUIDED or MPI_UNDEFINED"
                ),
            ))
        }
    })
}

/// The group `h`, with an error naming the argument `what`.
fn grp(call: &str, what: &str, h: MPI_Group) -> Result<Group, Error> {
    if h == MPI_GROUP_NULL {
        return Err(err(
            ErrorClass::Group,
            call,
            format!("{what} is MPI_GROUP_NULL"),
        ));
    }
    resolve::group(call, h).map_err(|_| {
        err(
            ErrorClass::Group,
            call,
            format!("{what} = {h:#x} is not a valid group"),
        )
    })
}

/// Store group `g` in `*out` (`MPI_GROUP_EMPTY` when it has no member).
fn put_group(call: &str, out: *mut MPI_Group, g: Group) -> Result<(), Error> {
    need(call, "newgroup", out)?;
    let h = if g.size() == 0 {
        MPI_GROUP_EMPTY
    } else {
        new_group(g)
    };
    ptr::write(call, "newgroup", out, h)
}

/// The ranks the `(first, last, stride)` triplets of `MPI_Group_range_incl`
/// / `_excl` name, checked against a group of `size`: valid, distinct, each
/// triplet moving from `first` towards `last`.
fn expand_ranges(
    call: &str,
    size: c_int,
    n: c_int,
    ranges: *const [c_int; 3],
) -> Result<Vec<c_int>, Error> {
    let n = ptr::len(call, "n", n)?;
    let tri = ptr::slice(call, "ranges", ranges, n)?;
    let mut out = Vec::new();
    let mut seen = vec![false; size.max(0) as usize];
    for (i, &[first, last, stride]) in tri.iter().enumerate() {
        for (j, v) in [(0, first), (1, last)] {
            if !(0..size).contains(&v) {
                return Err(err(
                    ErrorClass::Rank,
                    call,
                    format!("ranges[{i}][{j}] = {v} is not a rank of the group (size {size})"),
                ));
            }
        }
        if stride == 0 {
            return Err(err(
                ErrorClass::Arg,
                call,
                format!("ranges[{i}] has stride 0"),
            ));
        }
        if (stride > 0 && first > last) || (stride < 0 && first < last) {
            return Err(err(
                ErrorClass::Arg,
                call,
                format!(
                    "ranges[{i}] = ({first}, {last}, {stride}): the stride does not lead from first to last"
                ),
            ));
        }
        let mut r = first as i64;
        while (stride > 0 && r <= last as i64) || (stride < 0 && r >= last as i64) {
            if std::mem::replace(&mut seen[r as usize], true) {
                return Err(err(
                    ErrorClass::Rank,
                    call,
                    format!("rank {r} (from ranges[{i}]) appears more than once"),
                ));
            }
            out.push(r as c_int);
            r += stride as i64;
        }
    }
    Ok(out)
}

mpi_fn! {
    fn Comm_rank(comm: MPI_Comm, rank: *mut c_int) fast {
        let c = resolve::fast_comm(comm);
        c.map(|c| frame::fast(CALL, comm, || ptr::write(CALL, "rank", rank, c.rank())))
    } {
        let c = resolve::comm(CALL, comm)?;
        ptr::write(CALL, "rank", rank, c.rank())
    }

    fn Comm_size(comm: MPI_Comm, size: *mut c_int) fast {
        let c = resolve::fast_comm(comm);
        c.map(|c| frame::fast(CALL, comm, || ptr::write(CALL, "size", size, c.size())))
    } {
        let c = resolve::comm(CALL, comm)?;
        ptr::write(CALL, "size", size, c.size())
    }

    fn Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) {
        dup(CALL, comm, newcomm).map(|_| ())
    }

    fn Comm_dup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm) {
        resolve::comm(CALL, comm)?;
        info_entries(CALL, info)?;
        dup(CALL, comm, newcomm).map(|_| ())
    }

    fn Comm_idup(comm: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request) {
        resolve::comm(CALL, comm)?;
        need(CALL, "request", request)?;
        dup(CALL, comm, newcomm)?;
        ptr::write(CALL, "request", request, new_done_request(comm, MPI_Status::empty()))
    }

    fn Comm_idup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm, request: *mut MPI_Request) {
        resolve::comm(CALL, comm)?;
        info_entries(CALL, info)?;
        need(CALL, "request", request)?;
        dup(CALL, comm, newcomm)?;
        ptr::write(CALL, "request", request, new_done_request(comm, MPI_Status::empty()))
    }

    fn Comm_split(comm: MPI_Comm, color: c_int, key: c_int, newcomm: *mut MPI_Comm) {
        let c = resolve::comm(CALL, comm)?;
        need(CALL, "newcomm", newcomm)?;
        if color < 0 && color != MPI_UNDEFINED {
            return Err(err(ErrorClass::Arg, CALL, format!("color = {color} is negative (and not MPI_UNDEFINED)")));
        }
        let n = c.split(color, key)?;
        ptr::write(CALL, "newcomm", newcomm, register_opt(comm, n))
    }

    fn Comm_split_type(comm: MPI_Comm, split_type: c_int, key: c_int, info: MPI_Info, newcomm: *mut MPI_Comm) {
        let c = resolve::comm(CALL, comm)?;
        need(CALL, "newcomm", newcomm)?;
        let kind = split_kind(CALL, split_type, info)?;
        let mut n = c.split_shared_opt(key, kind.is_some())?;
        if kind == Some(true) {
            // HW_UNGUIDED: the node must be a strict subset of the parent.
            if let Some(s) = n.take_if(|s| s.size() == c.size()) {
                let _ = s.free();
            }
        }
        ptr::write(CALL, "newcomm", newcomm, register_opt(comm, n))
    }

    fn Comm_create(comm: MPI_Comm, group: MPI_Group, newcomm: *mut MPI_Comm) {
        let c = resolve::comm(CALL, comm)?;
        let g = grp(CALL, "group", group)?;
        need(CALL, "newcomm", newcomm)?;
        let n = c.create(&g)?;
        ptr::write(CALL, "newcomm", newcomm, register_opt(comm, n))
    }

    fn Comm_create_group(comm: MPI_Comm, group: MPI_Group, tag: c_int, newcomm: *mut MPI_Comm) {
        let c = resolve::comm(CALL, comm)?;
        let g = grp(CALL, "group", group)?;
        need(CALL, "newcomm", newcomm)?;
        let n = c.create_group(&g, tag)?;
        ptr::write(CALL, "newcomm", newcomm, register_opt(comm, n))
    }

    fn Comm_free(comm: *mut MPI_Comm) {
        let h = ptr::read(CALL, "comm", comm)?;
        let c = resolve::comm(CALL, h)?;
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            let name = if h == MPI_COMM_WORLD { "MPI_COMM_WORLD" } else { "MPI_COMM_SELF" };
            return Err(err(ErrorClass::Comm, CALL, format!("{name} cannot be freed")));
        }
        cache::delete_comm_attrs(CALL, h)?;
        c.free()?;
        let obj = decode(Kind::Comm, h).and_then(|i| state().comms.remove(i));
        if let Some(o) = obj {
            o.free_topo();
        }
        crate::bsend::forget_comm(h);
        // The freed handle has no error handler any more.
        errors::set_target(MPI_COMM_WORLD);
        ptr::write(CALL, "comm", comm, MPI_COMM_NULL)
    }

    fn Comm_compare(comm1: MPI_Comm, comm2: MPI_Comm, result: *mut c_int) {
        let a = resolve::comm(CALL, comm1)?;
        let b = resolve::comm(CALL, comm2)?;
        let r = if comm1 == comm2 { MPI_IDENT } else { cmp_value(a.compare(&b)) };
        ptr::write(CALL, "result", result, r)
    }

    fn Comm_group(comm: MPI_Comm, group: *mut MPI_Group) {
        let c = resolve::comm(CALL, comm)?;
        need(CALL, "group", group)?;
        ptr::write(CALL, "group", group, new_group(c.group()))
    }

    fn Comm_set_name(comm: MPI_Comm, comm_name: *const c_char) {
        resolve::comm(CALL, comm)?;
        let mut s = ptr::cstr(CALL, "comm_name", comm_name)?;
        // Names longer than MPI_MAX_OBJECT_NAME - 1 are cut (MPI-4 §7.8).
        let mut n = s.len().min(MPI_MAX_OBJECT_NAME - 1);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s.truncate(n);
        resolve::with_comm(CALL, comm, |o| o.name = s)
    }

    fn Comm_get_name(comm: MPI_Comm, comm_name: *mut c_char, resultlen: *mut c_int) {
        if comm == MPI_COMM_NULL {
            // MPI 4.1: the null handle's name.
            return ptr::write_cstr(CALL, "comm_name", comm_name, MPI_MAX_OBJECT_NAME, "MPI_COMM_NULL", resultlen);
        }
        resolve::comm(CALL, comm)?;
        let name = resolve::with_comm(CALL, comm, |o| o.name.clone())?;
        ptr::write_cstr(CALL, "comm_name", comm_name, MPI_MAX_OBJECT_NAME, &name, resultlen)
    }

    fn Comm_test_inter(comm: MPI_Comm, flag: *mut c_int) {
        let c = resolve::comm(CALL, comm)?;
        ptr::write(CALL, "flag", flag, c_int::from(c.is_inter()))
    }

    fn Comm_remote_size(comm: MPI_Comm, size: *mut c_int) {
        let c = resolve::comm(CALL, comm)?;
        match c.remote_size() {
            Some(n) => ptr::write(CALL, "size", size, n),
            None => Err(not_inter(CALL)),
        }
    }

    fn Comm_remote_group(comm: MPI_Comm, group: *mut MPI_Group) {
        let c = resolve::comm(CALL, comm)?;
        need(CALL, "group", group)?;
        match c.remote_group() {
            Some(g) => ptr::write(CALL, "group", group, new_group(g)),
            None => Err(not_inter(CALL)),
        }
    }

    fn Intercomm_create(local_comm: MPI_Comm, local_leader: c_int, peer_comm: MPI_Comm, remote_leader: c_int, tag: c_int, newintercomm: *mut MPI_Comm) {
        let c = resolve::comm(CALL, local_comm)?;
        need(CALL, "newintercomm", newintercomm)?;
        // peer_comm matters at the local leader only.
        let peer = if c.rank() == local_leader {
            let p = resolve::comm(CALL, peer_comm)?;
            resolve::comm(CALL, local_comm)?;
            Some(p)
        } else {
            None
        };
        let n = c.intercomm_create(local_leader, peer.as_deref(), remote_leader, tag)?;
        ptr::write(CALL, "newintercomm", newintercomm, register_child(local_comm, n))
    }

    fn Intercomm_merge(intercomm: MPI_Comm, high: c_int, newintracomm: *mut MPI_Comm) {
        let c = resolve::comm(CALL, intercomm)?;
        need(CALL, "newintracomm", newintracomm)?;
        let n = c.merge(high != 0)?;
        ptr::write(CALL, "newintracomm", newintracomm, register_child(intercomm, n))
    }

    fn Comm_get_parent(parent: *mut MPI_Comm) {
        // No process of a gmpi job was spawned.
        ptr::write(CALL, "parent", parent, MPI_COMM_NULL)
    }

    fn Comm_get_info(comm: MPI_Comm, info_used: *mut MPI_Info) {
        resolve::comm(CALL, comm)?;
        need(CALL, "info_used", info_used)?;
        // gmpi acts on no communicator hint: the hints in use are none.
        let h = new_info(InfoObj::default());
        ptr::write(CALL, "info_used", info_used, h)
    }

    safe fn Comm_set_info(comm: MPI_Comm, info: MPI_Info) {
        resolve::comm(CALL, comm)?;
        info_entries(CALL, info).map(|_| ())
    }

    // ---- groups ----

    fn Group_size(group: MPI_Group, size: *mut c_int) {
        let g = grp(CALL, "group", group)?;
        ptr::write(CALL, "size", size, g.size())
    }

    fn Group_rank(group: MPI_Group, rank: *mut c_int) {
        let g = grp(CALL, "group", group)?;
        ptr::write(CALL, "rank", rank, g.rank().unwrap_or(MPI_UNDEFINED))
    }

    fn Group_translate_ranks(group1: MPI_Group, n: c_int, ranks1: *const c_int, group2: MPI_Group, ranks2: *mut c_int) {
        let a = grp(CALL, "group1", group1)?;
        let b = grp(CALL, "group2", group2)?;
        let n = ptr::len(CALL, "n", n)?;
        let r1 = ptr::slice(CALL, "ranks1", ranks1, n)?;
        let t = a.translate_ranks(r1, &b)?;
        ptr::slice_mut(CALL, "ranks2", ranks2, n)?.copy_from_slice(&t);
        Ok(())
    }

    fn Group_compare(group1: MPI_Group, group2: MPI_Group, result: *mut c_int) {
        let a = grp(CALL, "group1", group1)?;
        let b = grp(CALL, "group2", group2)?;
        ptr::write(CALL, "result", result, cmp_value(a.compare(&b)))
    }

    fn Group_union(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group) {
        let a = grp(CALL, "group1", group1)?;
        let b = grp(CALL, "group2", group2)?;
        put_group(CALL, newgroup, a.union(&b))
    }

    fn Group_intersection(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group) {
        let a = grp(CALL, "group1", group1)?;
        let b = grp(CALL, "group2", group2)?;
        put_group(CALL, newgroup, a.intersection(&b))
    }

    fn Group_difference(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group) {
        let a = grp(CALL, "group1", group1)?;
        let b = grp(CALL, "group2", group2)?;
        put_group(CALL, newgroup, a.difference(&b))
    }

    fn Group_incl(group: MPI_Group, n: c_int, ranks: *const c_int, newgroup: *mut MPI_Group) {
        let g = grp(CALL, "group", group)?;
        let n = ptr::len(CALL, "n", n)?;
        let r = ptr::slice(CALL, "ranks", ranks, n)?;
        put_group(CALL, newgroup, g.incl(r)?)
    }

    fn Group_excl(group: MPI_Group, n: c_int, ranks: *const c_int, newgroup: *mut MPI_Group) {
        let g = grp(CALL, "group", group)?;
        let n = ptr::len(CALL, "n", n)?;
        let r = ptr::slice(CALL, "ranks", ranks, n)?;
        put_group(CALL, newgroup, g.excl(r)?)
    }

    fn Group_range_incl(group: MPI_Group, n: c_int, ranges: *mut [c_int; 3], newgroup: *mut MPI_Group) {
        let g = grp(CALL, "group", group)?;
        let r = expand_ranges(CALL, g.size(), n, ranges)?;
        put_group(CALL, newgroup, g.incl(&r)?)
    }

    fn Group_range_excl(group: MPI_Group, n: c_int, ranges: *mut [c_int; 3], newgroup: *mut MPI_Group) {
        let g = grp(CALL, "group", group)?;
        let r = expand_ranges(CALL, g.size(), n, ranges)?;
        put_group(CALL, newgroup, g.excl(&r)?)
    }

    fn Group_free(group: *mut MPI_Group) {
        let h = ptr::read(CALL, "group", group)?;
        // MPI_GROUP_EMPTY may be freed (as in MPICH): nothing to release.
        if h != MPI_GROUP_EMPTY {
            let gone = decode(Kind::Group, h).and_then(|i| state().groups.remove(i));
            if gone.is_none() {
                grp(CALL, "group", h)?;
            }
            crate::bsend::forget_group(h);
        }
        ptr::write(CALL, "group", group, MPI_GROUP_NULL)
    }
}

direct_fn! {
    // Its errors go to the error handler it is given, not to a
    // communicator's.
    fn Intercomm_create_from_groups(local_group: MPI_Group, local_leader: c_int, remote_group: MPI_Group, remote_leader: c_int, stringtag: *const c_char, info: MPI_Info, errhandler: MPI_Errhandler, newintercomm: *mut MPI_Comm) {
        frame::with_errhandler(CALL, errhandler, || intercomm_from_groups(CALL, local_group, local_leader, remote_group, remote_leader, stringtag, info, errhandler, newintercomm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_expand_and_check() {
        let t = [[0, 6, 2], [5, 1, -2]];
        assert_eq!(
            expand_ranges("t", 8, 2, t.as_ptr()).unwrap(),
            vec![0, 2, 4, 6, 5, 3, 1]
        );
        let dup = [[0, 4, 2], [4, 4, 1]];
        assert_eq!(
            expand_ranges("t", 8, 2, dup.as_ptr()).unwrap_err().class(),
            ErrorClass::Rank
        );
        let zero = [[0, 4, 0]];
        assert_eq!(
            expand_ranges("t", 8, 1, zero.as_ptr()).unwrap_err().class(),
            ErrorClass::Arg
        );
        let out = [[0, 8, 1]];
        assert_eq!(
            expand_ranges("t", 8, 1, out.as_ptr()).unwrap_err().class(),
            ErrorClass::Rank
        );
        let back = [[4, 0, 1]];
        assert_eq!(
            expand_ranges("t", 8, 1, back.as_ptr()).unwrap_err().class(),
            ErrorClass::Arg
        );
        assert_eq!(
            expand_ranges("t", 8, -1, out.as_ptr()).unwrap_err().class(),
            ErrorClass::Arg
        );
    }
}
