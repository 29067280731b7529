//! Intercommunicators: two disjoint groups joined so that point-to-point
//! ranks (and collective data) name the *other* group (MPI-3.1 §6.6).
//!
//! An intercommunicator's context ids are agreed by both groups: each group
//! takes the maximum of its members' next free ids, the two leaders swap
//! theirs (with the group's world ranks where the other side needs them),
//! each leader broadcasts what came back, and everyone takes the larger.
//! The intercommunicator owns ids `c` and `c + 1` (point-to-point and
//! collective traffic between the groups) and `c + 2`, `c + 3`, which each
//! group's private local intracommunicator uses; every member's next free
//! id moves to `c + 4`.
//!
//! Construction: [`Communicator::intercomm_create`] (`MPI_Intercomm_create`),
//! and on an intercommunicator [`Communicator::dup`], [`Communicator::split`],
//! [`Communicator::split_shared_opt`], [`Communicator::create`] (each makes
//! another intercommunicator) and [`Communicator::merge`]
//! (`MPI_Intercomm_merge`, an intracommunicator over both groups).
//! Collectives on intercommunicators are in `coll/inter.rs`.

use gmpi_pml::SendMode;

use crate::coll::inter::swap_in;
use crate::coll::sched::Sched;
use crate::comm::Communicator;
use crate::engine::{self, Locked};
use crate::error::{Error, ErrorClass, Result};
use crate::group::{Comparison, Group, UNDEFINED};
use crate::TAG_UB;

impl Communicator {
    /// Size of the remote group (`MPI_Comm_remote_size`); `None` on an
    /// intracommunicator.
    pub fn remote_size(&self) -> Option<i32> {
        self.remote().map(|r| r.world.len() as i32)
    }

    /// The remote group (`MPI_Comm_remote_group`); `None` on an
    /// intracommunicator.
    pub fn remote_group(&self) -> Option<Group> {
        let me = self.inner.world[self.rank() as usize];
        self.remote().map(|r| Group::new(r.world.clone(), me))
    }

    fn ctx_overflow(&self, call: &str, ctx: u32) -> Result<()> {
        if ctx > crate::comm::AGREE_CTX - 8 {
            Err(Error::new(
                ErrorClass::Intern,
                call,
                self.rank(),
                "out of context ids",
            ))
        } else {
            Ok(())
        }
    }

    /// Make an intercommunicator between this communicator's group and
    /// another, disjoint group (`MPI_Intercomm_create`). Collective over
    /// this communicator and the other group's. `local_leader` is a rank of
    /// this communicator; `peer` (needed only at the local leader) is a
    /// communicator holding both leaders, where the remote leader is rank
    /// `remote_leader`; the leaders talk on it with `tag`, which no other
    /// pending message on `peer` may use.
    pub fn intercomm_create(
        &self,
        local_leader: i32,
        peer: Option<&Communicator>,
        remote_leader: i32,
        tag: i32,
    ) -> Result<Communicator> {
        self.intercomm_create_on(
            "MPI_Intercomm_create",
            local_leader,
            peer,
            remote_leader,
            tag,
            false,
        )
    }

    /// The intercommunicator between `local` (holding this process) and
    /// the disjoint group `remote`, whose leaders are rank `local_leader`
    /// and `remote_leader` of each (`MPI_Intercomm_create_from_groups`);
    /// `self` is a communicator holding both groups (the world). Collective
    /// over both groups only; `tag` tells concurrent calls apart (the
    /// hash of MPI's string tag).
    pub fn intercomm_from_groups(
        &self,
        local: &Group,
        local_leader: i32,
        remote: &Group,
        remote_leader: i32,
        tag: i32,
    ) -> Result<Communicator> {
        const CALL: &str = "MPI_Intercomm_create_from_groups";
        self.check_live(CALL)?;
        let me = self.rank();
        let err = |class, msg: String| Error::new(class, CALL, me, msg);
        if !(0..remote.size()).contains(&remote_leader) {
            return Err(err(
                ErrorClass::Rank,
                format!(
                    "invalid remote_leader {remote_leader} (remote group size {})",
                    remote.size()
                ),
            ));
        }
        let rw = remote.world[remote_leader as usize];
        let Some(peer_rank) = self.inner.world.iter().position(|&w| w == rw) else {
            return Err(err(
                ErrorClass::Group,
                format!("the remote leader (world rank {rw}) is not in the communicator"),
            ));
        };
        // The local group's own communicator; only its members take part.
        let Some(local_comm) = self.create_group(local, tag)? else {
            return Err(err(
                ErrorClass::Group,
                "this process is not in local_group".into(),
            ));
        };
        local_comm.intercomm_create_on(CALL, local_leader, Some(self), peer_rank as i32, tag, true)
    }

    /// `intercomm_create`; the leaders talk on `peer`'s point-to-point
    /// context with `tag`, or (`coll`) on its collective context with a
    /// negative tag derived from `tag`, which no collective uses.
    fn intercomm_create_on(
        &self,
        call: &'static str,
        local_leader: i32,
        peer: Option<&Communicator>,
        remote_leader: i32,
        tag: i32,
        coll: bool,
    ) -> Result<Communicator> {
        self.check_live(call)?;
        self.check_intra(call, "the local communicator of an intercommunicator")?;
        let me = self.rank();
        let err = |class, msg: String| Error::new(class, call, me, msg);
        if !(0..self.size()).contains(&local_leader) {
            return Err(err(
                ErrorClass::Rank,
                format!(
                    "invalid local_leader {local_leader} (communicator size {})",
                    self.size()
                ),
            ));
        }
        if me == local_leader {
            let Some(p) = peer else {
                return Err(err(
                    ErrorClass::Comm,
                    "peer_comm is MPI_COMM_NULL at the local leader".into(),
                ));
            };
            p.check_live(call)?;
            p.check_intra(call, "peer_comm")?;
            if !(0..p.size()).contains(&remote_leader) {
                return Err(err(
                    ErrorClass::Rank,
                    format!(
                        "invalid remote_leader {remote_leader} (peer_comm size {})",
                        p.size()
                    ),
                ));
            }
            if remote_leader == p.rank() {
                return Err(err(
                    ErrorClass::Rank,
                    format!("remote_leader {remote_leader} is the local leader itself"),
                ));
            }
            if !(0..=TAG_UB).contains(&tag) {
                return Err(err(
                    ErrorClass::Tag,
                    format!("invalid tag {tag} (must be 0..={TAG_UB})"),
                ));
            }
        }
        engine::with(call, |e| {
            // Rounds of (next free id, busy) until no member of either group
            // was busy (see Engine::ctx_round).
            let (c, remote) = loop {
                let (x, busy, owned) = self.ctx_round(e, call)?;
                let mut mine = vec![x, u32::from(busy)];
                mine.extend_from_slice(&self.inner.world);
                let theirs = swap_in(
                    e,
                    call,
                    self,
                    local_leader,
                    || {
                        let p = peer.expect("checked at the leader");
                        if coll {
                            Sched::new(call, &p.inner, -1 - tag)
                        } else {
                            Sched::p2p(call, &p.inner, tag, SendMode::Standard)
                        }
                    },
                    remote_leader,
                    &mine,
                );
                let checked = theirs.and_then(|t| {
                    let (y, theirs_busy, remote) = match t.as_slice() {
                        [y, b, remote @ ..] => (*y, *b != 0, remote.to_vec()),
                        _ => {
                            return Err(err(
                                ErrorClass::Intern,
                                "empty reply from the remote leader".into(),
                            ))
                        }
                    };
                    if remote.is_empty() {
                        return Err(err(ErrorClass::Intern, "the remote group is empty".into()));
                    }
                    if let Some(w) = remote.iter().find(|w| self.inner.world.contains(w)) {
                        return Err(err(
                            ErrorClass::Comm,
                            format!("world rank {w} is in both the local and the remote group (they must be disjoint)"),
                        ));
                    }
                    let c = x.max(y);
                    if !(busy || theirs_busy) {
                        self.ctx_overflow(call, c)?;
                    }
                    Ok((c, busy || theirs_busy, remote))
                });
                match checked {
                    Err(err) => {
                        e.ctx_round_end(owned, None, 0);
                        return Err(err);
                    }
                    Ok((_, true, _)) => {
                        e.ctx_round_end(owned, None, 0);
                        e.ctx_retry(call)?;
                    }
                    Ok((c, false, remote)) => {
                        e.ctx_round_end(owned, Some(c), 4);
                        break (c, remote);
                    }
                }
            };
            let remote = &remote[..];
            tracing::debug!(target: "coll", "{call}: context {c}, {} local and {} remote ranks", self.size(), remote.len());
            Ok(Communicator::inter_from_parts(
                e,
                c,
                self.inner.world.clone(),
                remote.to_vec(),
            ))
        })
    }

    /// Swap `extra` (the same on every rank of this group) with the remote
    /// group, agreeing on a fresh context id on the way: (the id, the
    /// remote group's `extra`). Every member's next free id moves past the
    /// id and the three after it. The engine is locked.
    fn inter_agree(
        &self,
        e: &mut Locked,
        call: &'static str,
        extra: &[u32],
    ) -> Result<(u32, Vec<u32>)> {
        let r = self.remote().expect("an intercommunicator");
        let tag = self.next_tag();
        // Rounds of (next free id, busy) until no member of either group
        // was busy (see Engine::ctx_round).
        loop {
            let (x, busy, owned) = r.local.ctx_round(e, call)?;
            let mut mine = vec![x, u32::from(busy)];
            mine.extend_from_slice(extra);
            let theirs = swap_in(
                e,
                call,
                &r.local,
                0,
                || Sched::new(call, &self.inner, tag),
                0,
                &mine,
            );
            let theirs = match theirs {
                Ok(t) if t.len() >= 2 => t,
                Ok(_) => {
                    e.ctx_round_end(owned, None, 0);
                    return Err(Error::new(
                        ErrorClass::Intern,
                        call,
                        self.rank(),
                        "empty reply from the remote leader",
                    ));
                }
                Err(err) => {
                    e.ctx_round_end(owned, None, 0);
                    return Err(err);
                }
            };
            if busy || theirs[1] != 0 {
                e.ctx_round_end(owned, None, 0);
                e.ctx_retry(call)?;
                continue;
            }
            let c = x.max(theirs[0]);
            if let Err(err) = self.ctx_overflow(call, c) {
                e.ctx_round_end(owned, None, 0);
                return Err(err);
            }
            e.ctx_round_end(owned, Some(c), 4);
            return Ok((c, theirs[2..].to_vec()));
        }
    }

    /// `dup` of an intercommunicator.
    pub(crate) fn inter_dup(&self, call: &'static str) -> Result<Communicator> {
        let remote = self.remote().expect("an intercommunicator").world.clone();
        engine::with(call, |e| {
            let (c, _) = self.inter_agree(e, call, &[])?;
            tracing::debug!(target: "coll", "{call}: intercommunicator context {c}");
            Ok(Communicator::inter_from_parts(
                e,
                c,
                self.inner.world.clone(),
                remote,
            ))
        })
    }

    /// `split` of an intercommunicator: the new local group is this group's
    /// ranks of `color` (ordered by `key`, then rank), the new remote group
    /// the remote group's ranks of the same color; `None` if either is
    /// empty or `color` is [`UNDEFINED`].
    pub(crate) fn inter_split(
        &self,
        call: &'static str,
        color: i32,
        key: i32,
    ) -> Result<Option<Communicator>> {
        let r = self.remote().expect("an intercommunicator");
        let remote_world = r.world.clone();
        let local = r.local.clone();
        engine::with(call, |e| {
            let n = self.size() as usize;
            let mut all = vec![0i32; 2 * n];
            local.allgather_in(e, call, &[color, key][..], &mut all[..])?;
            let mine: Vec<u32> = all.iter().map(|&v| v as u32).collect();
            let (c, theirs) = self.inter_agree(e, call, &mine)?;
            if color == UNDEFINED {
                return Ok(None);
            }
            let pick = |pairs: &[u32], world: &[u32]| -> Vec<u32> {
                let mut m: Vec<(i32, usize)> = (0..pairs.len() / 2)
                    .filter(|&i| pairs[2 * i] as i32 == color)
                    .map(|i| (pairs[2 * i + 1] as i32, i))
                    .collect();
                m.sort();
                m.iter().map(|&(_, i)| world[i]).collect()
            };
            let lw = pick(&mine, &self.inner.world);
            let rw = pick(&theirs, &remote_world);
            tracing::debug!(target: "coll", "{call}: color {color} → intercommunicator context {c}, {} local and {} remote ranks", lw.len(), rw.len());
            if rw.is_empty() {
                return Ok(None);
            }
            Ok(Some(Communicator::inter_from_parts(e, c, lw, rw)))
        })
    }

    /// `create` of an intercommunicator: `group` is a subgroup of the local
    /// group (the same on every local rank); the result joins it to the
    /// subgroup the remote group chose. `None` outside `group`, or if the
    /// remote subgroup is empty.
    pub(crate) fn inter_create(
        &self,
        call: &'static str,
        group: &Group,
    ) -> Result<Option<Communicator>> {
        if let Some(w) = group.world.iter().find(|w| !self.inner.world.contains(w)) {
            return Err(Error::new(
                ErrorClass::Group,
                call,
                self.rank(),
                format!("world rank {w} of the group is not in the local group of the intercommunicator"),
            ));
        }
        engine::with(call, |e| {
            let (c, theirs) = self.inter_agree(e, call, &group.world)?;
            if !group.world.contains(&e.rank) || theirs.is_empty() {
                return Ok(None);
            }
            Ok(Some(Communicator::inter_from_parts(
                e,
                c,
                group.world.to_vec(),
                theirs,
            )))
        })
    }

    /// An intracommunicator over both groups of this intercommunicator
    /// (`MPI_Intercomm_merge`). Collective over both groups; every rank of a
    /// group passes the same `high`. The group passing `high = false` comes
    /// first; if both pass the same value, the group holding the lower
    /// world rank comes first.
    pub fn merge(&self, high: bool) -> Result<Communicator> {
        const CALL: &str = "MPI_Intercomm_merge";
        self.check_live(CALL)?;
        let Some(r) = self.remote() else {
            return Err(Error::new(
                ErrorClass::Comm,
                CALL,
                self.rank(),
                "the communicator is not an intercommunicator",
            ));
        };
        let remote = r.world.clone();
        engine::with(CALL, |e| {
            let (c, theirs) = self.inter_agree(e, CALL, &[u32::from(high)])?;
            let their_high = theirs.first().copied().unwrap_or(0) != 0;
            let local_first = if high != their_high {
                !high
            } else {
                self.inner.world.iter().min() < remote.iter().min()
            };
            let world = if local_first {
                [&self.inner.world[..], &remote[..]].concat()
            } else {
                [&remote[..], &self.inner.world[..]].concat()
            };
            tracing::debug!(target: "coll", "{CALL}: context {c}, {} ranks", world.len());
            Ok(Communicator::from_parts(e, c, world))
        })
    }

    /// `compare` where either side is an intercommunicator.
    pub(crate) fn inter_compare(&self, other: &Communicator) -> Comparison {
        let (Some(a), Some(b)) = (self.remote_group(), other.remote_group()) else {
            return Comparison::Unequal;
        };
        let local = self.group().compare(&other.group());
        let remote = a.compare(&b);
        match (local, remote) {
            (Comparison::Ident, Comparison::Ident) => Comparison::Congruent,
            (Comparison::Unequal, _) | (_, Comparison::Unequal) => Comparison::Unequal,
            _ => Comparison::Similar,
        }
    }
}
