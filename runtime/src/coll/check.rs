//! Argument checks shared by the collectives: the root, equal sizes of two
//! buffers, a buffer's per-rank blocks (equal, `v` counts and
//! displacements, `w` byte displacements and datatypes), a reduction's op
//! against its datatype; and, under `coll_check`, the check that every
//! rank passed the same root, op and size (one extra exchange per call).

use super::sched::Reduction;
use super::shm::wire::{self, HDR};
use crate::buffer::{Ty, View};
use crate::comm::Communicator;
use crate::datatype::Datatype;
use crate::engine::Locked;
use crate::error::{Error, ErrorClass, Result};
use crate::op::Op;
use crate::typemap::UserDatatype;

/// A reduction on `ty`, checked.
pub(crate) fn reduction(call: &str, rank: i32, op: &Op, ty: &Ty) -> Result<Reduction> {
    if let Op::User(_) = op {
        let dt = Datatype::Opaque { size: ty.size() };
        crate::op::check_datatype(op, dt).map_err(|m| Error::new(ErrorClass::Op, call, rank, m))?;
        return Ok(Reduction {
            op: op.clone(),
            dt,
            unit: ty.size().max(1),
        });
    }
    let Some(prim) = ty.prim() else {
        return Err(Error::new(
            ErrorClass::Op,
            call,
            rank,
            format!(
                "{} needs a datatype made of one predefined type; this one mixes several (use a user-defined op)",
                op.name()
            ),
        ));
    };
    crate::op::check(op, prim).map_err(|m| Error::new(ErrorClass::Op, call, rank, m))?;
    Ok(Reduction {
        op: op.clone(),
        dt: Datatype::Primitive(prim),
        unit: Datatype::Primitive(prim).size().max(1),
    })
}

impl Communicator {
    pub(super) fn check_root(&self, call: &str, root: i32) -> Result<()> {
        if (0..self.size()).contains(&root) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorClass::Root,
                call,
                self.rank(),
                format!("invalid root {root} (communicator size {})", self.size()),
            ))
        }
    }

    pub(super) fn err(&self, class: ErrorClass, call: &str, msg: impl std::fmt::Display) -> Error {
        Error::new(class, call, self.rank(), msg)
    }

    /// Equal byte counts of two buffers, or an error naming both.
    pub(super) fn same_bytes(&self, call: &str, a: (&str, usize), b: (&str, usize)) -> Result<()> {
        if a.1 == b.1 {
            Ok(())
        } else {
            Err(self.err(
                ErrorClass::Count,
                call,
                format!(
                    "{} holds {} bytes but {} holds {} bytes (they must match)",
                    a.0, a.1, b.0, b.1
                ),
            ))
        }
    }

    /// Per-rank blocks of a buffer of `n × k` elements.
    pub(super) fn blocks_of(&self, call: &str, what: &str, v: &View) -> Result<Vec<View>> {
        // One block per rank of the other side: the remote group's on an
        // intercommunicator.
        let n = self.inner.peers().len();
        if !v.count.is_multiple_of(n) {
            return Err(self.err(
                ErrorClass::Count,
                call,
                format!(
                    "{what} has {} elements, not a multiple of the {}",
                    v.count,
                    self.peers_desc()
                ),
            ));
        }
        let k = v.count / n;
        Ok((0..n)
            .map(|i| v.sub(i * k, k).expect("inside the buffer"))
            .collect())
    }

    /// Blocks given by counts and displacements (elements of `v`'s type).
    pub(super) fn vblocks(
        &self,
        call: &str,
        what: &str,
        v: &View,
        counts: &[i32],
        displs: &[i32],
    ) -> Result<Vec<View>> {
        let n = self.inner.peers().len();
        if counts.len() != n || displs.len() != n {
            return Err(self.err(
                ErrorClass::Arg,
                call,
                format!(
                    "{what}: {} counts and {} displacements for {n} ranks",
                    counts.len(),
                    displs.len()
                ),
            ));
        }
        (0..n)
            .map(|i| {
                let (c, d) = (counts[i], displs[i]);
                if c < 0 {
                    return Err(self.err(
                        ErrorClass::Count,
                        call,
                        format!("{what}: count[{i}] = {c} is negative"),
                    ));
                }
                if d < 0 {
                    return Err(self.err(
                        ErrorClass::Arg,
                        call,
                        format!("{what}: displacement[{i}] = {d} is negative"),
                    ));
                }
                v.sub(d as usize, c as usize).ok_or_else(|| {
                    self.err(
                        ErrorClass::Buffer,
                        call,
                        format!(
                            "{what}: block {i} ({c} elements at displacement {d}) reaches past the end of the buffer"
                        ),
                    )
                })
            })
            .collect()
    }

    /// Blocks given by counts, byte displacements and datatypes (the `w`
    /// forms).
    pub(super) fn wblocks(
        &self,
        call: &str,
        what: &str,
        v: &View,
        counts: &[i32],
        displs: &[isize],
        types: &[UserDatatype],
    ) -> Result<Vec<View>> {
        let n = self.inner.peers().len();
        if counts.len() != n || displs.len() != n || types.len() != n {
            return Err(self.err(
                ErrorClass::Arg,
                call,
                format!(
                    "{what}: {} counts, {} displacements and {} datatypes for {n} ranks",
                    counts.len(),
                    displs.len(),
                    types.len()
                ),
            ));
        }
        (0..n)
            .map(|i| {
                if counts[i] < 0 {
                    return Err(self.err(ErrorClass::Count, call, format!("{what}: count[{i}] = {} is negative", counts[i])));
                }
                if !types[i].is_committed() {
                    return Err(self.err(ErrorClass::Type, call, format!("{what}: datatype[{i}] is not committed")));
                }
                // Displacements are relative to the buffer's start.
                let base = View { origin: 0, ..v.clone() };
                base.at_byte(displs[i], counts[i] as usize, Ty::Derived(types[i].clone())).ok_or_else(|| {
                    self.err(ErrorClass::Buffer, call, format!("{what}: block {i} ({} elements at byte {}) reaches outside the buffer", counts[i], displs[i]))
                })
            })
            .collect()
    }

    /// The root's `size` equal blocks of an in-place rooted buffer (none
    /// elsewhere), after checking the root.
    pub(super) fn rooted_blocks(&self, call: &str, v: &View, root: i32) -> Result<Vec<View>> {
        self.check_root(call, root)?;
        if self.rank() == root {
            self.blocks_of(call, "the buffer", v)
        } else {
            Ok(Vec::new())
        }
    }

    /// The root's blocks of a `v` rooted collective (none elsewhere), after
    /// checking the root; `other` is the buffer on the other side (`None` in
    /// place), whose size must match the root's own block.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rooted_vblocks(
        &self,
        call: &str,
        what: &str,
        v: &View,
        counts: &[i32],
        displs: &[i32],
        root: i32,
        other: Option<(&str, &View)>,
    ) -> Result<Vec<View>> {
        self.check_root(call, root)?;
        if self.rank() != root {
            return Ok(Vec::new());
        }
        let b = self.vblocks(call, what, v, counts, displs)?;
        if let Some((name, o)) = other {
            let mine = format!("the root's block of {what}");
            self.same_bytes(call, (&mine, b[root as usize].bytes()), (name, o.bytes()))?;
        }
        Ok(b)
    }

    /// With `coll_check`, make sure every rank passed the same root, op and
    /// byte count (`bytes` is `None` for the `v` forms).
    ///
    /// Inlined: every collective calls it and it is off by default, so the
    /// common case is one test, not a call (the check itself is out of line).
    #[inline]
    pub(super) fn check_agree(
        &self,
        e: &mut Locked,
        call: &'static str,
        root: i32,
        op: Option<&Op>,
        bytes: Option<usize>,
    ) -> Result<()> {
        if !e.cfg.coll_check || self.size() < 2 {
            return Ok(());
        }
        self.check_agree_gathered(e, call, root, op, bytes)
    }

    #[inline(never)]
    fn check_agree_gathered(
        &self,
        e: &mut Locked,
        call: &'static str,
        root: i32,
        op: Option<&Op>,
        bytes: Option<usize>,
    ) -> Result<()> {
        // The same header the shared-memory path exchanges, gathered from
        // every rank and compared the same way.
        let len = bytes.unwrap_or(u32::MAX as usize);
        let mine = wire::header(wire::kind::CHECK, root, op, len);
        let mut all = vec![0u8; HDR * self.size() as usize];
        self.allgather_in(e, call, &mine[..], &mut all[..])?;
        let slots: Vec<&[u8]> = all.chunks(HDR).collect();
        match wire::mismatch(call, self.rank(), &mine, &slots) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}
