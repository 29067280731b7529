//! Process groups (`MPI_Group`): ordered sets of processes, named by their
//! world ranks. Groups are local objects: building one talks to nobody.

use std::sync::Arc;

use crate::error::{Error, ErrorClass, Result};

/// `MPI_UNDEFINED` (MPICH's value): "no such rank" in [`Group::rank`] and
/// [`Group::translate_ranks`], and the color that leaves a rank out of
/// [`crate::Communicator::split`].
pub const UNDEFINED: i32 = -32766;

/// How two groups or communicators compare (`MPI_Group_compare`,
/// `MPI_Comm_compare`); values are MPICH's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Comparison {
    /// `MPI_IDENT`: the same object (communicators) or the same members in the
    /// same order (groups).
    Ident = 0,
    /// `MPI_CONGRUENT`: different communicators over identical groups.
    Congruent = 1,
    /// `MPI_SIMILAR`: the same members in a different order.
    Similar = 2,
    /// `MPI_UNEQUAL`: different members.
    Unequal = 3,
}

/// An ordered set of processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// World rank of each member, in group order.
    pub(crate) world: Arc<Vec<u32>>,
    /// This process's world rank.
    pub(crate) me: u32,
}

impl Group {
    pub(crate) fn new(world: Vec<u32>, me: u32) -> Self {
        Self {
            world: Arc::new(world),
            me,
        }
    }

    /// The empty group (`MPI_GROUP_EMPTY`).
    pub fn empty() -> Self {
        let me = crate::engine::with("MPI_GROUP_EMPTY", |e| Ok(e.rank)).unwrap_or(0);
        Self::new(Vec::new(), me)
    }

    /// Number of members.
    pub fn size(&self) -> i32 {
        self.world.len() as i32
    }

    /// This process's rank in the group, or `None` if it is not a member
    /// (`MPI_Group_rank` answers [`UNDEFINED`] then).
    pub fn rank(&self) -> Option<i32> {
        self.world
            .iter()
            .position(|&w| w == self.me)
            .map(|r| r as i32)
    }

    /// World ranks of the members, in order.
    pub fn world_ranks(&self) -> &[u32] {
        &self.world
    }

    fn check_ranks(&self, call: &str, ranks: &[i32], distinct: bool) -> Result<()> {
        let mut seen = vec![false; self.world.len()];
        for (i, &r) in ranks.iter().enumerate() {
            if !(0..self.size()).contains(&r) {
                return Err(Error::new(
                    ErrorClass::Rank,
                    call,
                    self.me as i32,
                    format!(
                        "ranks[{i}] = {r} is not a rank of the group (size {})",
                        self.size()
                    ),
                ));
            }
            if distinct {
                if seen[r as usize] {
                    return Err(Error::new(
                        ErrorClass::Rank,
                        call,
                        self.me as i32,
                        format!("ranks[{i}] = {r} appears twice"),
                    ));
                }
                seen[r as usize] = true;
            }
        }
        Ok(())
    }

    /// The group of the members `ranks` (in that order) (`MPI_Group_incl`).
    pub fn incl(&self, ranks: &[i32]) -> Result<Group> {
        self.check_ranks("MPI_Group_incl", ranks, true)?;
        Ok(Self::new(
            ranks.iter().map(|&r| self.world[r as usize]).collect(),
            self.me,
        ))
    }

    /// The group without the members `ranks`, order kept (`MPI_Group_excl`).
    pub fn excl(&self, ranks: &[i32]) -> Result<Group> {
        self.check_ranks("MPI_Group_excl", ranks, true)?;
        let mut drop = vec![false; self.world.len()];
        for &r in ranks {
            drop[r as usize] = true;
        }
        Ok(Self::new(
            self.world
                .iter()
                .zip(&drop)
                .filter(|(_, &d)| !d)
                .map(|(&w, _)| w)
                .collect(),
            self.me,
        ))
    }

    /// Members of `self`, then the members of `other` not in `self`
    /// (`MPI_Group_union`).
    pub fn union(&self, other: &Group) -> Group {
        let mut v = self.world.to_vec();
        v.extend(other.world.iter().filter(|w| !self.world.contains(w)));
        Self::new(v, self.me)
    }

    /// Members of `self` that are also in `other`, in `self`'s order
    /// (`MPI_Group_intersection`).
    pub fn intersection(&self, other: &Group) -> Group {
        Self::new(
            self.world
                .iter()
                .copied()
                .filter(|w| other.world.contains(w))
                .collect(),
            self.me,
        )
    }

    /// Members of `self` not in `other`, in `self`'s order
    /// (`MPI_Group_difference`).
    pub fn difference(&self, other: &Group) -> Group {
        Self::new(
            self.world
                .iter()
                .copied()
                .filter(|w| !other.world.contains(w))
                .collect(),
            self.me,
        )
    }

    /// The rank in `other` of each of `ranks` of `self`, [`UNDEFINED`] where
    /// a process is not in `other` (`MPI_Group_translate_ranks`).
    /// `crate::PROC_NULL` translates to itself.
    pub fn translate_ranks(&self, ranks: &[i32], other: &Group) -> Result<Vec<i32>> {
        const CALL: &str = "MPI_Group_translate_ranks";
        ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                if r == crate::PROC_NULL {
                    return Ok(crate::PROC_NULL);
                }
                if !(0..self.size()).contains(&r) {
                    return Err(Error::new(
                        ErrorClass::Rank,
                        CALL,
                        self.me as i32,
                        format!(
                            "ranks[{i}] = {r} is not a rank of the group (size {})",
                            self.size()
                        ),
                    ));
                }
                let w = self.world[r as usize];
                Ok(other
                    .world
                    .iter()
                    .position(|&x| x == w)
                    .map_or(UNDEFINED, |p| p as i32))
            })
            .collect()
    }

    /// Compare two groups (`MPI_Group_compare`): [`Comparison::Ident`],
    /// [`Comparison::Similar`] or [`Comparison::Unequal`].
    pub fn compare(&self, other: &Group) -> Comparison {
        if self.world == other.world {
            return Comparison::Ident;
        }
        let mut a = self.world.to_vec();
        let mut b = other.world.to_vec();
        a.sort_unstable();
        b.sort_unstable();
        if a == b {
            Comparison::Similar
        } else {
            Comparison::Unequal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[u32]) -> Group {
        Group::new(v.to_vec(), 2)
    }

    #[test]
    fn set_operations_keep_mpi_order() {
        let a = g(&[0, 1, 2, 3, 4]);
        let b = g(&[4, 2, 7]);
        assert_eq!(a.incl(&[3, 1]).unwrap().world_ranks(), &[3, 1]);
        assert_eq!(a.excl(&[0, 4]).unwrap().world_ranks(), &[1, 2, 3]);
        assert_eq!(a.union(&b).world_ranks(), &[0, 1, 2, 3, 4, 7]);
        assert_eq!(b.union(&a).world_ranks(), &[4, 2, 7, 0, 1, 3]);
        assert_eq!(b.intersection(&a).world_ranks(), &[4, 2]);
        assert_eq!(a.difference(&b).world_ranks(), &[0, 1, 3]);
        assert_eq!(a.rank(), Some(2));
        assert_eq!(b.rank(), Some(1));
        assert_eq!(g(&[5]).rank(), None);
        assert_eq!(
            b.translate_ranks(&[0, 1, 2, crate::PROC_NULL], &a).unwrap(),
            vec![4, 2, UNDEFINED, crate::PROC_NULL]
        );
    }

    #[test]
    fn bad_ranks_are_errors() {
        let a = g(&[0, 1, 2]);
        assert_eq!(a.incl(&[3]).unwrap_err().class(), ErrorClass::Rank);
        assert_eq!(a.incl(&[1, 1]).unwrap_err().class(), ErrorClass::Rank);
        assert_eq!(a.excl(&[-1]).unwrap_err().class(), ErrorClass::Rank);
        assert!(a.translate_ranks(&[5], &a).is_err());
    }

    #[test]
    fn compare() {
        assert_eq!(g(&[0, 1]).compare(&g(&[0, 1])), Comparison::Ident);
        assert_eq!(g(&[0, 1]).compare(&g(&[1, 0])), Comparison::Similar);
        assert_eq!(g(&[0, 1]).compare(&g(&[1, 2])), Comparison::Unequal);
    }
}
