//! Communicators, groups, requests and info arguments by handle.

use gmpi::{Communicator, Error, ErrorClass, Group};

use crate::abi::{
    decode, Kind, MPI_Comm, MPI_Group, MPI_Info, MPI_Request, MPI_COMM_NULL, MPI_COMM_SELF,
    MPI_COMM_WORLD, MPI_GROUP_EMPTY, MPI_INFO_ENV, MPI_INFO_NULL,
};
use crate::errors::set_target;
use crate::tables::{comm_slot, err, running, state, CommObj, SELF, WORLD};

/// An object found by handle: a predefined one (borrowed, no reference
/// count touched: the hot path of every call on `MPI_COMM_WORLD` with a
/// predefined datatype) or a clone of a user one.
#[derive(Debug)]
pub enum Shared<T: 'static> {
    Static(&'static T),
    Owned(T),
}

impl<T: Clone> Shared<T> {
    /// The object itself.
    pub fn into_owned(self) -> T {
        match self {
            Shared::Static(t) => t.clone(),
            Shared::Owned(t) => t,
        }
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Shared::Static(t) => t,
            Shared::Owned(t) => t,
        }
    }
}

// ---- communicators ----

/// The communicator `h`; errors of the current call then go to its error
/// handler.
pub fn comm(call: &str, h: MPI_Comm) -> Result<Shared<Communicator>, Error> {
    let c = match h {
        MPI_COMM_WORLD => WORLD.get().map(Shared::Static),
        MPI_COMM_SELF => SELF.get().map(Shared::Static),
        _ => decode(Kind::Comm, h)
            .and_then(|i| state().comms.get(i).map(|o| Shared::Owned(o.comm.clone()))),
    };
    match c {
        Some(c) => {
            set_target(h);
            Ok(c)
        }
        None if h == MPI_COMM_NULL => Err(err(ErrorClass::Comm, call, "comm is MPI_COMM_NULL")),
        None => Err(err(
            ErrorClass::Comm,
            call,
            format!("comm = {h:#x} is not a valid communicator"),
        )),
    }
}

/// The predefined communicator `h` (`MPI_COMM_WORLD` or `MPI_COMM_SELF`)
/// while MPI is running: the look-up of the hot path (no lock, no
/// reference count, no error target recorded: the caller raises errors on
/// `h` itself). `None` for anything else (the caller falls back to
/// [`comm`], which also checks initialisation).
#[inline]
pub fn fast_comm(h: MPI_Comm) -> Option<&'static Communicator> {
    let c = match h {
        MPI_COMM_WORLD => &WORLD,
        MPI_COMM_SELF => &SELF,
        _ => return None,
    };
    if !running() {
        return None;
    }
    c.get()
}

/// Run `f` on the C-side record of communicator `h`.
pub fn with_comm<R>(
    call: &str,
    h: MPI_Comm,
    f: impl FnOnce(&mut CommObj) -> R,
) -> Result<R, Error> {
    let mut st = state();
    match comm_slot(h).and_then(|i| st.comms.get_mut(i)) {
        Some(o) => Ok(f(o)),
        None => Err(err(
            ErrorClass::Comm,
            call,
            format!("comm = {h:#x} is not a valid communicator"),
        )),
    }
}

// ---- groups ----

/// The group `h`.
pub fn group(call: &str, h: MPI_Group) -> Result<Group, Error> {
    if h == MPI_GROUP_EMPTY {
        return Ok(Group::empty());
    }
    decode(Kind::Group, h)
        .and_then(|i| state().groups.get(i).cloned())
        .ok_or_else(|| {
            err(
                ErrorClass::Group,
                call,
                format!("group = {h:#x} is not a valid group"),
            )
        })
}

// ---- requests ----

/// The slot of request `h`, or an `MPI_ERR_REQUEST` error.
pub fn req_slot(call: &str, h: MPI_Request) -> Result<usize, Error> {
    decode(Kind::Request, h).ok_or_else(|| {
        err(
            ErrorClass::Request,
            call,
            format!("request = {h:#x} is not a valid request"),
        )
    })
}

// ---- info objects ----

/// Check an info argument: `MPI_INFO_NULL`, `MPI_INFO_ENV` or a live info
/// object; else an `MPI_ERR_INFO` error.
pub fn check_info(call: &str, info: MPI_Info) -> Result<(), Error> {
    if info == MPI_INFO_NULL
        || info == MPI_INFO_ENV
        || decode(Kind::Info, info).is_some_and(|i| state().infos.get(i).is_some())
    {
        return Ok(());
    }
    Err(err(
        ErrorClass::Info,
        call,
        format!("info = {info:#x} is not a valid info object"),
    ))
}
