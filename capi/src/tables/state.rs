//! Every table of the C ABI in one [`State`] behind one lock, and the
//! registration of new objects: a slot, then the handle that names it.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, MutexGuard};

use gmpi::{Group, UserDatatype};

use crate::abi::{
    encode, Kind, MPI_Comm, MPI_Datatype, MPI_Group, MPI_Info, MPI_Request, MPI_Status,
    MPI_COMM_SELF, MPI_COMM_WORLD,
};
use crate::tables::objects::{
    CommObj, Envelope, ErrhObj, InfoObj, KeyvalObj, OpObj, SessionObj, TypeObj, WinObj,
};
use crate::tables::requests::{Active, ReqObj};
use crate::tables::slab::Table;

/// Every table of the C ABI.
#[derive(Debug, Default)]
pub struct State {
    pub comms: Table<CommObj>,
    pub groups: Table<Group>,
    pub types: Table<TypeObj>,
    pub ops: Table<OpObj>,
    pub reqs: Table<ReqObj>,
    pub errhs: Table<ErrhObj>,
    pub keyvals: Table<KeyvalObj>,
    pub infos: Table<InfoObj>,
    pub wins: Table<WinObj>,
    pub sessions: Table<SessionObj>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);

/// The tables (a poisoned lock is taken over: the tables stay consistent
/// because every update is a single insert or remove).
pub fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The slot of communicator `h` in the table (`MPI_COMM_WORLD` and
/// `MPI_COMM_SELF` hold slots 0 and 1, taken at `MPI_Init`).
pub fn comm_slot(h: MPI_Comm) -> Option<usize> {
    match h {
        MPI_COMM_WORLD => Some(0),
        MPI_COMM_SELF => Some(1),
        _ => crate::abi::decode(Kind::Comm, h),
    }
}

/// The handle of communicator slot `i`.
pub fn comm_handle(i: usize) -> MPI_Comm {
    match i {
        0 => MPI_COMM_WORLD,
        1 => MPI_COMM_SELF,
        _ => encode(Kind::Comm, i),
    }
}

/// Register a new communicator; its handle.
pub fn new_comm(obj: CommObj) -> MPI_Comm {
    let i = state().comms.insert(obj);
    comm_handle(i)
}

/// Register a new group; its handle.
pub fn new_group(g: Group) -> MPI_Group {
    encode(Kind::Group, state().groups.insert(g))
}

/// Register a new (uncommitted) datatype; its handle.
pub fn new_type(dt: UserDatatype, env: Envelope) -> MPI_Datatype {
    let name = String::new();
    encode(
        Kind::Datatype,
        state().types.insert(TypeObj {
            dt,
            name,
            env,
            attrs: BTreeMap::new(),
        }),
    )
}

/// Register a new info object; its handle.
pub fn new_info(obj: InfoObj) -> MPI_Info {
    encode(Kind::Info, state().infos.insert(obj))
}

/// Register an operation in flight; its handle.
pub fn new_request(a: Active) -> MPI_Request {
    encode(Kind::Request, state().reqs.insert(ReqObj::Active(a)))
}

/// Register a request that is already complete; its handle.
pub fn new_done_request(comm: MPI_Comm, st: MPI_Status) -> MPI_Request {
    encode(
        Kind::Request,
        state().reqs.insert(ReqObj::Done { comm, st }),
    )
}
