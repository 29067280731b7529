//! Handle translation: the one module that knows what an `MPI_Comm`,
//! `MPI_Datatype`, … looks like on the wire of the MPICH ABI.
//!
//! MPICH's handles are 32-bit integers. Predefined objects have fixed values
//! (`MPI_COMM_WORLD = 0x44000000`, `MPI_INT = 0x4c000405`: kind bits 30–31 =
//! builtin, object type in bits 26–29, and for datatypes the size in bits
//! 8–15). gmpi gives the objects users create the "indirect" kind
//! (`0xc0000000 | type << 26 | slot`), so they never collide with a
//! predefined value, and decodes them back to a slot in a table.
//! Fortran handles are the same integers, so `MPI_X_f2c`/`c2f` are the
//! identity.
//!
//! Every table lives in one [`State`] behind one lock, taken only for
//! look-ups and updates, never while the runtime runs.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

use gmpi::{Communicator, Datatype, Error, ErrorClass, Group, Op, Primitive, UserDatatype};

pub type MPI_Comm = c_int;
pub type MPI_Group = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Op = c_int;
pub type MPI_Request = c_int;
pub type MPI_Message = c_int;
pub type MPI_Errhandler = c_int;
pub type MPI_Info = c_int;
pub type MPI_Win = c_int;
pub type MPI_Fint = c_int;
pub type MPI_Aint = isize;
pub type MPI_Offset = i64;
pub type MPI_Count = i64;

/// `MPI_Status` exactly as MPICH lays it out (20 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}

impl MPI_Status {
    /// The status of a completed operation (`MPI_ERROR` left as given).
    pub fn set(&mut self, st: &gmpi::Status) {
        self.MPI_SOURCE = st.source();
        self.MPI_TAG = st.tag();
        self.set_bytes(st.bytes() as u64, st.is_cancelled());
    }

    /// Store the byte count and the cancelled flag.
    pub fn set_bytes(&mut self, bytes: u64, cancelled: bool) {
        self.count_lo = bytes as u32 as c_int;
        self.count_hi_and_cancelled = (((bytes >> 32) as c_int) << 1) | cancelled as c_int;
    }

    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        (self.count_lo as u32 as u64) | (((self.count_hi_and_cancelled as u32 >> 1) as u64) << 32)
    }

    /// Whether the operation was cancelled.
    pub fn cancelled(&self) -> bool {
        self.count_hi_and_cancelled & 1 != 0
    }

    /// The status of an inactive or null request ("empty" in the
    /// standard): any source, any tag, no data.
    pub fn inactive() -> Self {
        Self {
            MPI_SOURCE: MPI_ANY_SOURCE,
            ..Self::empty()
        }
    }

    /// The status of a receive from `MPI_PROC_NULL`.
    pub fn empty() -> Self {
        Self {
            count_lo: 0,
            count_hi_and_cancelled: 0,
            MPI_SOURCE: MPI_PROC_NULL,
            MPI_TAG: MPI_ANY_TAG,
            MPI_ERROR: MPI_SUCCESS,
        }
    }
}

// ---- constants of the MPICH ABI ----

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ROOT: c_int = -3;
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;
pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;
pub const MPI_MAX_PROCESSOR_NAME: usize = 128;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_INFO_KEY: usize = 255;
pub const MPI_MAX_INFO_VAL: usize = 1024;
pub const MPI_BSEND_OVERHEAD: c_int = 96;
pub const MPI_COMM_TYPE_SHARED: c_int = 1;
pub const MPI_ORDER_C: c_int = 56;
pub const MPI_ORDER_FORTRAN: c_int = 57;
pub const MPI_GRAPH: c_int = 1;
pub const MPI_CART: c_int = 2;
pub const MPI_DIST_GRAPH: c_int = 3;
pub const MPI_ERR_LASTCODE: c_int = 0x3fffffff;

pub const MPI_COMM_NULL: MPI_Comm = 0x04000000;
pub const MPI_COMM_WORLD: MPI_Comm = 0x44000000;
pub const MPI_COMM_SELF: MPI_Comm = 0x44000001;
pub const MPI_GROUP_NULL: MPI_Group = 0x08000000;
pub const MPI_GROUP_EMPTY: MPI_Group = 0x48000000;
pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x0c000000;
pub const MPI_OP_NULL: MPI_Op = 0x18000000;
pub const MPI_REQUEST_NULL: MPI_Request = 0x2c000000;
pub const MPI_MESSAGE_NULL: MPI_Message = 0x2c000000;
pub const MPI_MESSAGE_NO_PROC: MPI_Message = 0x6c000000;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x14000000;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x54000000;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x54000001;
pub const MPI_ERRORS_ABORT: MPI_Errhandler = 0x54000003;
pub const MPI_INFO_NULL: MPI_Info = 0x1c000000;
pub const MPI_INFO_ENV: MPI_Info = 0x5c000001;
pub const MPI_WIN_NULL: MPI_Win = 0x20000000;
pub const MPI_KEYVAL_INVALID: c_int = 0x24000000;

pub const MPI_TAG_UB: c_int = 0x64400001;
pub const MPI_HOST: c_int = 0x64400003;
pub const MPI_IO: c_int = 0x64400005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x64400007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x64400009;
pub const MPI_LASTUSEDCODE: c_int = 0x6440000b;
pub const MPI_APPNUM: c_int = 0x6440000d;

pub const MPI_MAX: MPI_Op = 0x58000001;
pub const MPI_MIN: MPI_Op = 0x58000002;
pub const MPI_SUM: MPI_Op = 0x58000003;
pub const MPI_PROD: MPI_Op = 0x58000004;
pub const MPI_LAND: MPI_Op = 0x58000005;
pub const MPI_BAND: MPI_Op = 0x58000006;
pub const MPI_LOR: MPI_Op = 0x58000007;
pub const MPI_BOR: MPI_Op = 0x58000008;
pub const MPI_LXOR: MPI_Op = 0x58000009;
pub const MPI_BXOR: MPI_Op = 0x5800000a;
pub const MPI_MINLOC: MPI_Op = 0x5800000b;
pub const MPI_MAXLOC: MPI_Op = 0x5800000c;
pub const MPI_REPLACE: MPI_Op = 0x5800000d;
pub const MPI_NO_OP: MPI_Op = 0x5800000e;

pub const MPI_CHAR: MPI_Datatype = 0x4c000101;
pub const MPI_BYTE: MPI_Datatype = 0x4c00010d;
pub const MPI_INT: MPI_Datatype = 0x4c000405;
pub const MPI_PACKED: MPI_Datatype = 0x4c00010f;
pub const MPI_LB: MPI_Datatype = 0x4c000010;
pub const MPI_UB: MPI_Datatype = 0x4c000011;
pub const MPI_AINT: MPI_Datatype = 0x4c000843;

// Special pointer values.
pub const MPI_IN_PLACE: usize = usize::MAX; // (void *) -1
pub const MPI_STATUS_IGNORE: usize = 1;
pub const MPI_STATUSES_IGNORE: usize = 1;

/// The values of the kind and object-type bits of handles gmpi makes.
const USER: u32 = 0xc000_0000;
const SLOT: u32 = 0x03ff_ffff;

/// Object types (bits 26–29 of a handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    Comm = 0x1,
    Group = 0x2,
    Datatype = 0x3,
    Errhandler = 0x5,
    Op = 0x6,
    Info = 0x7,
    Keyval = 0x9,
    Request = 0xb,
}

/// The handle of slot `i` of a `kind` table.
pub fn encode(kind: Kind, i: usize) -> c_int {
    (USER | (kind as u32) << 26 | i as u32) as c_int
}

/// The slot a user handle of `kind` names, if it is one.
pub fn decode(kind: Kind, h: c_int) -> Option<usize> {
    let h = h as u32;
    (h & !SLOT == USER | (kind as u32) << 26).then_some((h & SLOT) as usize)
}

/// A slab of objects addressed by slot.
#[derive(Debug)]
pub struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Table<T> {
    pub fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(v);
                i
            }
            None => {
                self.slots.push(Some(v));
                self.slots.len() - 1
            }
        }
    }
    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i).and_then(Option::as_ref)
    }
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let v = self.slots.get_mut(i)?.take();
        if v.is_some() {
            self.free.push(i);
        }
        v
    }
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (i, v)))
    }
}

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
}

/// How a datatype was made (`MPI_Type_get_envelope`/`get_contents`).
#[derive(Debug, Clone, Default)]
pub struct Envelope {
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub aints: Vec<MPI_Aint>,
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

/// A C reduction function: `void f(void *in, void *inout, int *len,
/// MPI_Datatype *type)`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);

/// A user-defined reduction operation.
#[derive(Debug, Clone, Copy)]
pub struct OpObj {
    pub f: UserFn,
    pub commutative: bool,
}

/// A C communicator error handler: `void f(MPI_Comm *, int *, ...)`.
pub type CommErrFn = unsafe extern "C" fn(*mut MPI_Comm, *mut c_int);

/// A user error handler.
#[derive(Debug, Clone, Copy)]
pub struct ErrhObj {
    pub f: CommErrFn,
}

/// Attribute copy callback: `int f(MPI_Comm old, int keyval, void *extra,
/// void *val_in, void *val_out, int *flag)`.
pub type CopyFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// Attribute delete callback: `int f(MPI_Comm comm, int keyval, void *val,
/// void *extra)`.
pub type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

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

/// Every table of the C ABI.
#[derive(Debug, Default)]
pub struct State {
    pub comms: Table<CommObj>,
    pub groups: Table<Group>,
    pub types: Table<TypeObj>,
    pub ops: Table<OpObj>,
    pub reqs: Table<crate::p2p::ReqObj>,
    pub errhs: Table<ErrhObj>,
    pub keyvals: Table<KeyvalObj>,
    pub infos: Table<crate::info::InfoObj>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);

/// The tables (a poisoned lock is taken over: the tables stay consistent
/// because every update is a single insert or remove).
pub fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

// ---- the error handler target of the current call ----

/// The communicator whose error handler the current call uses. A plain
/// global, not a thread-local (a thread-local in a shared library costs a
/// `__tls_get_addr` call on every MPI call): gmpi is `MPI_THREAD_FUNNELED`,
/// so one thread makes MPI calls at a time.
static TARGET: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(MPI_COMM_WORLD);

/// Errors of the current call go to `comm`'s error handler.
#[inline]
pub fn set_target(comm: MPI_Comm) {
    TARGET.store(comm, std::sync::atomic::Ordering::Relaxed);
}

/// The communicator whose error handler the current call uses.
pub fn target() -> MPI_Comm {
    TARGET.load(std::sync::atomic::Ordering::Relaxed)
}

/// This process's rank in `MPI_COMM_WORLD`, or -1 before init.
pub fn world_rank() -> i32 {
    WORLD.get().map(|w| w.rank()).unwrap_or(-1)
}

/// An error of `class` in `call`, naming this rank.
pub fn err(class: ErrorClass, call: &str, what: impl std::fmt::Display) -> Error {
    Error::new(class, call, world_rank(), what)
}

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

/// `MPI_COMM_WORLD` and `MPI_COMM_SELF`, set at init (lock-free look-up).
pub static WORLD: OnceLock<Communicator> = OnceLock::new();
pub static SELF: OnceLock<Communicator> = OnceLock::new();

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
    if !crate::errors::running() {
        return None;
    }
    c.get()
}

/// The slot of communicator `h` in the table.
pub fn comm_slot(h: MPI_Comm) -> Option<usize> {
    match h {
        MPI_COMM_WORLD => Some(0),
        MPI_COMM_SELF => Some(1),
        _ => decode(Kind::Comm, h),
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

/// Register a new communicator; its handle.
pub fn new_comm(obj: CommObj) -> MPI_Comm {
    let i = state().comms.insert(obj);
    comm_handle(i)
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

/// Register a new group; its handle.
pub fn new_group(g: Group) -> MPI_Group {
    encode(Kind::Group, state().groups.insert(g))
}

// ---- datatypes ----

/// What a predefined MPICH datatype is in the runtime.
#[derive(Debug, Clone, Copy)]
enum Pre {
    P(Primitive),
    /// Moved as bytes; no predefined reduction applies.
    Bytes(usize),
}

use Primitive as P;

/// Every predefined datatype of the MPICH ABI: handle, name, meaning.
const PREDEFINED: &[(u32, &str, Pre)] = &[
    (0x4c000101, "MPI_CHAR", Pre::P(P::Char)),
    (0x4c000118, "MPI_SIGNED_CHAR", Pre::P(P::I8)),
    (0x4c000102, "MPI_UNSIGNED_CHAR", Pre::P(P::U8)),
    (0x4c00010d, "MPI_BYTE", Pre::P(P::Byte)),
    (0x4c00040e, "MPI_WCHAR", Pre::P(P::I32)),
    (0x4c000203, "MPI_SHORT", Pre::P(P::I16)),
    (0x4c000204, "MPI_UNSIGNED_SHORT", Pre::P(P::U16)),
    (0x4c000405, "MPI_INT", Pre::P(P::I32)),
    (0x4c000406, "MPI_UNSIGNED", Pre::P(P::U32)),
    (0x4c000807, "MPI_LONG", Pre::P(P::I64)),
    (0x4c000808, "MPI_UNSIGNED_LONG", Pre::P(P::U64)),
    (0x4c00040a, "MPI_FLOAT", Pre::P(P::F32)),
    (0x4c00080b, "MPI_DOUBLE", Pre::P(P::F64)),
    (0x4c00100c, "MPI_LONG_DOUBLE", Pre::Bytes(16)),
    (0x4c000809, "MPI_LONG_LONG_INT", Pre::P(P::I64)),
    (0x4c000819, "MPI_UNSIGNED_LONG_LONG", Pre::P(P::U64)),
    (0x4c00010f, "MPI_PACKED", Pre::P(P::Byte)),
    (0x8c000000, "MPI_FLOAT_INT", Pre::P(P::FloatInt)),
    (0x8c000001, "MPI_DOUBLE_INT", Pre::P(P::DoubleInt)),
    (0x8c000002, "MPI_LONG_INT", Pre::P(P::LongInt)),
    (0x8c000003, "MPI_SHORT_INT", Pre::P(P::ShortInt)),
    (0x4c000816, "MPI_2INT", Pre::P(P::TwoInt)),
    (0x8c000004, "MPI_LONG_DOUBLE_INT", Pre::Bytes(32)),
    (0x4c00081e, "MPI_COMPLEX", Pre::Bytes(8)),
    (0x4c001022, "MPI_DOUBLE_COMPLEX", Pre::Bytes(16)),
    (0x4c00041d, "MPI_LOGICAL", Pre::P(P::I32)),
    (0x4c00041c, "MPI_REAL", Pre::P(P::F32)),
    (0x4c00081f, "MPI_DOUBLE_PRECISION", Pre::P(P::F64)),
    (0x4c00041b, "MPI_INTEGER", Pre::P(P::I32)),
    (0x4c000820, "MPI_2INTEGER", Pre::P(P::TwoInt)),
    (0x4c000821, "MPI_2REAL", Pre::Bytes(8)),
    (0x4c001023, "MPI_2DOUBLE_PRECISION", Pre::Bytes(16)),
    (0x4c00011a, "MPI_CHARACTER", Pre::P(P::Char)),
    (0x4c000427, "MPI_REAL4", Pre::P(P::F32)),
    (0x4c000829, "MPI_REAL8", Pre::P(P::F64)),
    (0x4c00102b, "MPI_REAL16", Pre::Bytes(16)),
    (0x4c000828, "MPI_COMPLEX8", Pre::Bytes(8)),
    (0x4c00102a, "MPI_COMPLEX16", Pre::Bytes(16)),
    (0x4c00202c, "MPI_COMPLEX32", Pre::Bytes(32)),
    (0x4c00012d, "MPI_INTEGER1", Pre::P(P::I8)),
    (0x4c00022f, "MPI_INTEGER2", Pre::P(P::I16)),
    (0x4c000430, "MPI_INTEGER4", Pre::P(P::I32)),
    (0x4c000831, "MPI_INTEGER8", Pre::P(P::I64)),
    (0x4c000137, "MPI_INT8_T", Pre::P(P::I8)),
    (0x4c000238, "MPI_INT16_T", Pre::P(P::I16)),
    (0x4c000439, "MPI_INT32_T", Pre::P(P::I32)),
    (0x4c00083a, "MPI_INT64_T", Pre::P(P::I64)),
    (0x4c00013b, "MPI_UINT8_T", Pre::P(P::U8)),
    (0x4c00023c, "MPI_UINT16_T", Pre::P(P::U16)),
    (0x4c00043d, "MPI_UINT32_T", Pre::P(P::U32)),
    (0x4c00083e, "MPI_UINT64_T", Pre::P(P::U64)),
    (0x4c00013f, "MPI_C_BOOL", Pre::P(P::Bool)),
    (0x4c000840, "MPI_C_FLOAT_COMPLEX", Pre::Bytes(8)),
    (0x4c001041, "MPI_C_DOUBLE_COMPLEX", Pre::Bytes(16)),
    (0x4c002042, "MPI_C_LONG_DOUBLE_COMPLEX", Pre::Bytes(32)),
    (0x4c000843, "MPI_AINT", Pre::P(P::ISize)),
    (0x4c000844, "MPI_OFFSET", Pre::P(P::I64)),
    (0x4c000845, "MPI_COUNT", Pre::P(P::I64)),
    (0x4c000133, "MPI_CXX_BOOL", Pre::P(P::Bool)),
    (0x4c000834, "MPI_CXX_FLOAT_COMPLEX", Pre::Bytes(8)),
    (0x4c001035, "MPI_CXX_DOUBLE_COMPLEX", Pre::Bytes(16)),
    (0x4c002036, "MPI_CXX_LONG_DOUBLE_COMPLEX", Pre::Bytes(32)),
];

/// The predefined datatypes, indexed by the low byte of their handle
/// (unique among MPICH's builtin handles; the five `0x8c…` pair types sit at
/// 0xf0 + their index).
struct Predefined {
    by_slot: Vec<Option<(MPI_Datatype, &'static str, UserDatatype)>>,
    /// Per slot: the handle and, for a type the runtime views as a basic
    /// type ([`gmpi::View::raw_basic`]), that type (the hot path of
    /// [`crate::ptr::fast_buf`]).
    basic: Box<[(MPI_Datatype, Option<Datatype>); 256]>,
}

#[inline]
fn predef_slot(h: u32) -> Option<usize> {
    if h & 0xffff_0000 == 0x4c00_0000 {
        Some((h & 0xff) as usize)
    } else if (0x8c00_0000..=0x8c00_0004).contains(&h) {
        Some(0xf0 + (h & 0xf) as usize)
    } else {
        None
    }
}

static PREDEF: LazyLock<Predefined> = LazyLock::new(|| {
    let mut by_slot = vec![None; 256];
    let mut basic = Box::new([(MPI_DATATYPE_NULL, None); 256]);
    for &(h, name, pre) in PREDEFINED {
        let dt = match pre {
            Pre::P(p) => Datatype::Primitive(p),
            Pre::Bytes(size) => Datatype::Opaque { size },
        };
        let slot = predef_slot(h).expect("a predefined handle");
        debug_assert!(by_slot[slot].is_none(), "{name} collides");
        let udt = UserDatatype::from(dt);
        basic[slot] = (h as c_int, gmpi::View::raw_basic(&udt));
        by_slot[slot] = Some((h as c_int, name, udt));
    }
    Predefined { by_slot, basic }
});

/// Per slot of a predefined datatype the runtime views as a basic type:
/// `handle << 32 | (size + 1)` (0: none), the hot path's one-load look-up
/// (filled by [`init_fast_types`] before `MPI_Init` publishes the running
/// phase, which the hot path checks first).
static FAST_TYPES: [AtomicU64; 256] = [const { AtomicU64::new(0) }; 256];

/// Fill [`FAST_TYPES`] (at `MPI_Init`).
pub fn init_fast_types() {
    for (slot, &(h, d)) in PREDEF.basic.iter().enumerate() {
        if let Some(d) = d {
            let v = ((h as u32 as u64) << 32) | (d.size() as u64 + 1);
            FAST_TYPES[slot].store(v, Ordering::Relaxed);
        }
    }
}

/// The size of one element of the predefined datatype `h`, if the hot path
/// handles it (see [`fast_dtype`]); `None` otherwise.
#[inline(always)]
pub fn fast_size(h: MPI_Datatype) -> Option<usize> {
    if h as u32 & 0xffff_0000 != 0x4c00_0000 {
        return None;
    }
    let v = FAST_TYPES[(h & 0xff) as usize].load(Ordering::Relaxed);
    if (v >> 32) as u32 != h as u32 || v as u32 == 0 {
        return None;
    }
    Some(v as u32 as usize - 1)
}

/// The basic type the predefined datatype `h` is, if `h` is one the runtime
/// views as a basic type: the look-up of the hot path (no lock, no
/// reference count), with no error (the caller falls back to [`dtype`]).
#[inline]
pub fn fast_dtype(h: MPI_Datatype) -> Option<Datatype> {
    let slot = predef_slot(h as u32)?;
    match PREDEF.basic[slot & 0xff] {
        (hh, d) if hh == h => d,
        _ => None,
    }
}

/// The predefined datatype `h` and its name, if `h` is one.
pub fn predefined(h: MPI_Datatype) -> Option<(&'static UserDatatype, &'static str)> {
    let slot = predef_slot(h as u32)?;
    match &PREDEF.by_slot[slot] {
        Some((hh, name, dt)) if *hh == h => Some((dt, name)),
        _ => None,
    }
}

/// The datatype `h` (predefined or user).
pub fn dtype(call: &str, h: MPI_Datatype) -> Result<Shared<UserDatatype>, Error> {
    if let Some((dt, _)) = predefined(h) {
        return Ok(Shared::Static(dt));
    }
    if let Some(t) =
        decode(Kind::Datatype, h).and_then(|i| state().types.get(i).map(|o| o.dt.clone()))
    {
        return Ok(Shared::Owned(t));
    }
    Err(err(
        ErrorClass::Type,
        call,
        match h {
            MPI_DATATYPE_NULL => "datatype is MPI_DATATYPE_NULL".to_string(),
            MPI_LB | MPI_UB => {
                "MPI_LB and MPI_UB were removed in MPI-3 (use MPI_Type_create_resized)".to_string()
            }
            _ => format!("datatype = {h:#x} is not a valid datatype"),
        },
    ))
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

// ---- operations ----

/// The operation `h` for reducing data of datatype `dt_h` (`dt`): a
/// predefined op, or a user function wrapped to receive the datatype handle
/// and data in the datatype's own layout.
pub fn op(call: &str, h: MPI_Op, dt_h: MPI_Datatype, dt: &UserDatatype) -> Result<Op, Error> {
    let pre = match h {
        MPI_MAX => Some(Op::Max),
        MPI_MIN => Some(Op::Min),
        MPI_SUM => Some(Op::Sum),
        MPI_PROD => Some(Op::Prod),
        MPI_LAND => Some(Op::Land),
        MPI_BAND => Some(Op::Band),
        MPI_LOR => Some(Op::Lor),
        MPI_BOR => Some(Op::Bor),
        MPI_LXOR => Some(Op::Lxor),
        MPI_BXOR => Some(Op::Bxor),
        MPI_MINLOC => Some(Op::MinLoc),
        MPI_MAXLOC => Some(Op::MaxLoc),
        MPI_REPLACE => Some(Op::Replace),
        MPI_NO_OP => Some(Op::NoOp),
        _ => None,
    };
    if let Some(o) = pre {
        // Complex, long double and the Fortran pair types have no runtime
        // primitive: extops.rs reduces them.
        if let Some(r) = crate::extops::predefined_op(call, h, dt_h) {
            return r;
        }
        return Ok(o);
    }
    let Some(obj) = user_op(h) else {
        return Err(err(
            ErrorClass::Op,
            call,
            if h == MPI_OP_NULL {
                "op is MPI_OP_NULL".to_string()
            } else {
                format!("op = {h:#x} is not a valid operation")
            },
        ));
    };
    Ok(crate::coll::wrap_user_op(obj, dt_h, dt.clone()))
}

/// The predefined arithmetic or logical operation `h` (`MPI_MAX` ..
/// `MPI_BXOR`) as [`op`] returns it for the predefined datatype `dt_h`,
/// when no extension kernel takes over (the complex, long double and pair
/// types of extops.rs): the look-up of the collective hot path, with no
/// error (`None` sends the caller to [`op`], which checks it in full).
#[inline]
pub fn fast_op(h: MPI_Op, dt_h: MPI_Datatype) -> Option<Op> {
    if crate::extops::is_ext_type(dt_h) {
        return None;
    }
    Some(match h {
        MPI_MAX => Op::Max,
        MPI_MIN => Op::Min,
        MPI_SUM => Op::Sum,
        MPI_PROD => Op::Prod,
        MPI_LAND => Op::Land,
        MPI_BAND => Op::Band,
        MPI_LOR => Op::Lor,
        MPI_BOR => Op::Bor,
        MPI_LXOR => Op::Lxor,
        MPI_BXOR => Op::Bxor,
        _ => return None,
    })
}

/// The user operation `h`, if it is one.
pub fn user_op(h: MPI_Op) -> Option<OpObj> {
    decode(Kind::Op, h).and_then(|i| state().ops.get(i).copied())
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
