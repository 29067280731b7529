//! What the C ABI keeps per object, beside the runtime's own object.

use std::collections::BTreeMap;
use std::ffi::c_int;

use gmpi::{Communicator, Error, UserDatatype};

use crate::abi::{
    CommErrFn, CopyFn, DeleteFn, Kind, MPI_Aint, MPI_Count, MPI_Datatype, MPI_Errhandler, UserFn,
    UserFnC, MPI_ERRORS_ARE_FATAL,
};

/// An attribute value: what `MPI_Comm_set_attr` stored (a `void *`).
pub type AttrVal = usize;

/// A topology attached to a communicator, and the private duplicate of the
/// communicator its neighbourhood collectives run on (see `topo.rs`).
#[derive(Debug, Clone)]
pub enum Topo {
    Cart {
        dims: Vec<c_int>,
        periods: Vec<bool>,
        nbr: Communicator,
    },
    Graph {
        /// `MPI_Graph_create`'s `index` (cumulative degrees) and `edges`.
        index: Vec<c_int>,
        edges: Vec<c_int>,
        nbr: Communicator,
    },
    DistGraph {
        sources: Vec<c_int>,
        sourceweights: Vec<c_int>,
        destinations: Vec<c_int>,
        destweights: Vec<c_int>,
        weighted: bool,
        nbr: Communicator,
    },
}

impl Topo {
    /// The private communicator of the topology.
    pub fn nbr(&self) -> &Communicator {
        match self {
            Topo::Cart { nbr, .. } | Topo::Graph { nbr, .. } | Topo::DistGraph { nbr, .. } => nbr,
        }
    }

    /// The topology a duplicate (`MPI_Comm_dup`, `MPI_Comm_idup`) of a
    /// communicator with this topology gets: the same, with its own private
    /// communicator (collective over `new`, like the dup itself).
    pub fn dup_for(&self, new: &Communicator) -> Result<Topo, Error> {
        let nbr = new.dup()?;
        Ok(match self.clone() {
            Topo::Cart { dims, periods, .. } => Topo::Cart { dims, periods, nbr },
            Topo::Graph { index, edges, .. } => Topo::Graph { index, edges, nbr },
            Topo::DistGraph {
                sources,
                sourceweights,
                destinations,
                destweights,
                weighted,
                ..
            } => Topo::DistGraph {
                sources,
                sourceweights,
                destinations,
                destweights,
                weighted,
                nbr,
            },
        })
    }
}

/// A communicator and what the C ABI keeps beside it.
#[derive(Debug)]
pub struct CommObj {
    pub comm: Communicator,
    pub name: String,
    pub errh: MPI_Errhandler,
    pub attrs: BTreeMap<c_int, AttrVal>,
    pub topo: Option<Topo>,
}

impl CommObj {
    pub fn new(comm: Communicator, name: String) -> Self {
        Self {
            comm,
            name,
            errh: MPI_ERRORS_ARE_FATAL,
            attrs: BTreeMap::new(),
            topo: None,
        }
    }

    /// Free the private duplicate of the topology of a communicator that
    /// `MPI_Comm_free` removed from its table (call it without holding
    /// the tables' lock).
    pub fn free_topo(&self) {
        if let Some(t) = &self.topo {
            let nbr = t.nbr();
            if !nbr.is_freed() {
                if let Err(err) = nbr.free() {
                    tracing::warn!(target: "gmpi", "freeing a topology's private communicator: {err}");
                }
            }
        }
    }
}

/// How a datatype was made (`MPI_Type_get_envelope`/`get_contents`).
#[derive(Debug, Clone, Default)]
pub struct Envelope {
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub aints: Vec<MPI_Aint>,
    /// The large counts of a type built by a `_c` constructor (MPI 4.0
    /// records its counts and displacements here; only
    /// `MPI_Type_get_envelope_c`/`_contents_c` can decode such a type).
    pub counts: Vec<MPI_Count>,
    pub types: Vec<MPI_Datatype>,
}

/// A user datatype.
#[derive(Debug)]
pub struct TypeObj {
    pub dt: UserDatatype,
    pub name: String,
    pub env: Envelope,
    pub attrs: BTreeMap<c_int, AttrVal>,
}

/// A user-defined reduction operation.
#[derive(Debug, Clone, Copy)]
pub struct OpObj {
    pub f: UserOpFn,
    pub commutative: bool,
}

/// The C function of a user operation: `MPI_Op_create`'s (an `int` length)
/// or `MPI_Op_create_c`'s (an `MPI_Count` length).
#[derive(Debug, Clone, Copy)]
pub enum UserOpFn {
    Int(UserFn),
    Large(UserFnC),
}

/// A window and what the C ABI keeps beside it. The predefined attributes
/// (`MPI_WIN_SIZE`, …) are read through pointers to `vals`, boxed so they
/// stay put while the window lives.
#[derive(Debug)]
pub struct WinObj {
    pub win: gmpi::Window,
    pub name: String,
    pub errh: MPI_Errhandler,
    pub attrs: BTreeMap<c_int, AttrVal>,
    pub info: InfoObj,
    pub vals: Box<WinVals>,
}

/// The values the predefined window attributes point to.
#[derive(Debug, Default)]
pub struct WinVals {
    pub size: MPI_Aint,
    pub disp_unit: c_int,
    pub flavor: c_int,
    pub model: c_int,
}

/// A session (`MPI_Session_init`): its error handler and the info it was
/// given.
#[derive(Debug)]
pub struct SessionObj {
    pub errh: MPI_Errhandler,
    pub info: InfoObj,
}

/// A user error handler.
#[derive(Debug, Clone, Copy)]
pub struct ErrhObj {
    pub f: CommErrFn,
}

/// A user attribute key.
#[derive(Debug, Clone, Copy)]
pub struct KeyvalObj {
    pub copy: Option<CopyFn>,
    pub delete: Option<DeleteFn>,
    pub extra: usize,
    /// `Comm` or `Datatype`: which objects it may be set on.
    pub on: Kind,
    /// Freed by the user but still attached somewhere.
    pub freed: bool,
}

/// An info object: an ordered list of (key, value) strings.
#[derive(Debug, Default, Clone)]
pub struct InfoObj {
    pub entries: Vec<(String, String)>,
}

impl InfoObj {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Set `key` to `value` (replacing its value if already set).
    pub fn set(&mut self, key: &str, value: &str) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(e) => e.1 = value.to_string(),
            None => self.entries.push((key.to_string(), value.to_string())),
        }
    }

    /// Remove `key`; whether it was set.
    pub fn delete(&mut self, key: &str) -> bool {
        let n = self.entries.len();
        self.entries.retain(|(k, _)| k != key);
        self.entries.len() != n
    }
}
