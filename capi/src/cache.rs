//! Layer 5 of the C ABI: attribute caching on communicators and datatypes,
//! the machinery under the attribute entry points (`attrs.rs`) and under
//! every call that duplicates or frees an object with attributes
//! (`MPI_Comm_dup`, `MPI_Comm_free`, `MPI_Type_dup`, `MPI_Type_free`,
//! `MPI_Finalize` on `MPI_COMM_SELF`): keyvals, setting, getting and
//! deleting attributes, copying them when an object is duplicated and
//! deleting them when it is freed, and the predefined communicator
//! attributes (`MPI_TAG_UB`, …).
//!
//! The code is shared by both kinds of object through [`Obj`]. Values live in
//! the objects' `attrs` maps; the order in which attributes were set is kept
//! beside them, because deleting all of an object's attributes (freeing it,
//! and `MPI_Finalize` on `MPI_COMM_SELF`) runs the delete callbacks in the
//! reverse of that order, as the standard requires for `MPI_COMM_SELF`.
//!
//! A keyval freed while attributes still use it stays in the table, marked
//! freed, until the last of them is deleted. User callbacks run with no lock
//! held, so they may call MPI (even on the same object).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use gmpi::{Attr, Error, ErrorClass};

use crate::abi::*;
use crate::errors::{class_of, last_used_code};
use crate::ptr;
use crate::resolve::{self, predefined};
use crate::tables::*;

/// An object that can hold attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obj {
    Comm(MPI_Comm),
    Type(MPI_Datatype),
    Win(MPI_Win),
}

impl Obj {
    /// Which keyvals apply to it.
    fn kind(self) -> Kind {
        match self {
            Obj::Comm(_) => Kind::Comm,
            Obj::Type(_) => Kind::Datatype,
            Obj::Win(_) => Kind::Win,
        }
    }

    /// Its C handle (what the callbacks receive).
    fn handle(self) -> c_int {
        match self {
            Obj::Comm(h) | Obj::Type(h) | Obj::Win(h) => h,
        }
    }

    /// Its attribute map; `None` for a predefined datatype (which holds
    /// none); an error if the handle is not a live object.
    fn attrs<'a>(
        self,
        call: &str,
        st: &'a mut State,
    ) -> Result<Option<&'a mut BTreeMap<c_int, AttrVal>>, Error> {
        match self {
            Obj::Comm(h) => match comm_slot(h).and_then(|i| st.comms.get_mut(i)) {
                Some(o) => Ok(Some(&mut o.attrs)),
                None => Err(err(
                    ErrorClass::Comm,
                    call,
                    if h == MPI_COMM_NULL {
                        "comm is MPI_COMM_NULL".to_string()
                    } else {
                        format!("comm = {h:#x} is not a valid communicator")
                    },
                )),
            },
            Obj::Win(h) => match decode(Kind::Win, h).and_then(|i| st.wins.get_mut(i)) {
                Some(o) => Ok(Some(&mut o.attrs)),
                None => Err(crate::win::invalid(call, h)),
            },
            Obj::Type(h) => {
                if predefined(h).is_some() {
                    return Ok(None);
                }
                match decode(Kind::Datatype, h).and_then(|i| st.types.get_mut(i)) {
                    Some(o) => Ok(Some(&mut o.attrs)),
                    None => Err(err(
                        ErrorClass::Type,
                        call,
                        if h == MPI_DATATYPE_NULL {
                            "datatype is MPI_DATATYPE_NULL".to_string()
                        } else {
                            format!("datatype = {h:#x} is not a valid datatype")
                        },
                    )),
                }
            }
        }
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Comm => "communicator",
        Kind::Datatype => "datatype",
        Kind::Win => "window",
        _ => "other",
    }
}

// ---- the order attributes were set in ----

/// (object kind, object handle, keyval): one attribute.
type AttrKey = (u32, c_int, c_int);

/// When each attribute was set.
static ORDER: LazyLock<Mutex<HashMap<AttrKey, u64>>> = LazyLock::new(Default::default);
static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);

fn order() -> std::sync::MutexGuard<'static, HashMap<AttrKey, u64>> {
    ORDER.lock().unwrap_or_else(|p| p.into_inner())
}

fn mark_set(obj: Obj, key: c_int) {
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    order().insert((obj.kind() as u32, obj.handle(), key), seq);
}

fn unmark(obj: Obj, key: c_int) {
    order().remove(&(obj.kind() as u32, obj.handle(), key));
}

/// The keys of `keys` in the order they were set.
fn in_set_order(obj: Obj, mut keys: Vec<c_int>) -> Vec<c_int> {
    let o = order();
    keys.sort_by_key(|k| {
        o.get(&(obj.kind() as u32, obj.handle(), *k))
            .copied()
            .unwrap_or(0)
    });
    keys
}

// ---- keyvals ----

/// The name of a predefined communicator keyval, if `key` is one.
fn predefined_keyval(key: c_int) -> Option<(&'static str, usize)> {
    Some(match key {
        MPI_TAG_UB => ("MPI_TAG_UB", 0),
        MPI_HOST => ("MPI_HOST", 1),
        MPI_IO => ("MPI_IO", 2),
        MPI_WTIME_IS_GLOBAL => ("MPI_WTIME_IS_GLOBAL", 3),
        MPI_UNIVERSE_SIZE => ("MPI_UNIVERSE_SIZE", 4),
        MPI_LASTUSEDCODE => ("MPI_LASTUSEDCODE", 5),
        MPI_APPNUM => ("MPI_APPNUM", 6),
        _ => return None,
    })
}

/// The user keyval `key` for objects of kind `on`.
fn keyval(call: &str, on: Kind, key: c_int) -> Result<KeyvalObj, Error> {
    if key == MPI_KEYVAL_INVALID {
        return Err(err(
            ErrorClass::Keyval,
            call,
            "keyval is MPI_KEYVAL_INVALID",
        ));
    }
    if let Some((name, _)) = predefined_keyval(key) {
        return Err(err(
            ErrorClass::Keyval,
            call,
            format!("keyval = {name} is predefined: it can only be read with MPI_Comm_get_attr"),
        ));
    }
    let kv = decode(Kind::Keyval, key).and_then(|i| state().keyvals.get(i).copied());
    match kv {
        Some(kv) if kv.on == on => Ok(kv),
        Some(kv) => Err(err(
            ErrorClass::Keyval,
            call,
            format!(
                "keyval = {key:#x} is a {} keyval, not a {} keyval",
                kind_name(kv.on),
                kind_name(on)
            ),
        )),
        None => Err(err(
            ErrorClass::Keyval,
            call,
            format!("keyval = {key:#x} is not a valid keyval"),
        )),
    }
}

/// Create a keyval for objects of kind `on`; its handle goes to `*out`.
pub fn create_keyval(
    call: &str,
    on: Kind,
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    out: *mut c_int,
    extra: *mut c_void,
) -> Result<(), Error> {
    if out.is_null() {
        return Err(err(ErrorClass::Arg, call, "keyval is NULL"));
    }
    let i = state().keyvals.insert(KeyvalObj {
        copy,
        delete,
        extra: extra as usize,
        on,
        freed: false,
    });
    ptr::write(call, "keyval", out, encode(Kind::Keyval, i))
}

/// Whether any object still holds an attribute with `key`.
fn in_use(st: &State, key: c_int) -> bool {
    st.comms.iter().any(|(_, o)| o.attrs.contains_key(&key))
        || st.types.iter().any(|(_, o)| o.attrs.contains_key(&key))
}

/// Drop keyval `key` from the table if it was freed and nothing uses it.
fn release_if_unused(key: c_int) {
    let Some(i) = decode(Kind::Keyval, key) else {
        return;
    };
    let mut st = state();
    if st.keyvals.get(i).is_some_and(|kv| kv.freed) && !in_use(&st, key) {
        st.keyvals.remove(i);
    }
}

/// Free the keyval `*p` (of kind `on`) and set `*p = MPI_KEYVAL_INVALID`.
pub fn free_keyval(call: &str, on: Kind, p: *mut c_int) -> Result<(), Error> {
    let key = ptr::read(call, "keyval", p)?;
    let kv = keyval(call, on, key)?;
    if kv.freed {
        return Err(err(
            ErrorClass::Keyval,
            call,
            format!("keyval = {key:#x} was already freed"),
        ));
    }
    {
        let mut st = state();
        if let Some(o) = decode(Kind::Keyval, key).and_then(|i| st.keyvals.get_mut(i)) {
            o.freed = true;
        }
    }
    release_if_unused(key);
    ptr::write(call, "keyval", p, MPI_KEYVAL_INVALID)
}

/// The error of a user callback that returned `rc`.
fn callback_error(call: &str, what: &str, key: c_int, rc: c_int) -> Error {
    let class = class_of(rc)
        .and_then(runtime_class)
        .unwrap_or(ErrorClass::Other);
    err(
        class,
        call,
        format!("the attribute {what} callback of keyval {key:#x} returned error code {rc}"),
    )
}

/// Run the delete callback of `kv` on value `val` of `obj`.
fn run_delete(call: &str, obj: Obj, key: c_int, kv: &KeyvalObj, val: AttrVal) -> Result<(), Error> {
    if let Some(f) = kv.delete {
        let rc = ptr::call_delete(f, obj.handle(), key, val, kv.extra);
        if rc != MPI_SUCCESS {
            return Err(callback_error(call, "delete", key, rc));
        }
    }
    Ok(())
}

// ---- set / get / delete ----

/// `MPI_Comm_set_attr` / `MPI_Type_set_attr`: a value already set is first
/// deleted through the delete callback.
pub fn set(call: &str, obj: Obj, key: c_int, val: AttrVal) -> Result<(), Error> {
    let kv = keyval(call, obj.kind(), key)?;
    if kv.freed {
        return Err(err(
            ErrorClass::Keyval,
            call,
            format!("keyval = {key:#x} was freed"),
        ));
    }
    let old = match obj.attrs(call, &mut state())? {
        Some(m) => m.get(&key).copied(),
        None => {
            return Err(err(
                ErrorClass::Type,
                call,
                format!(
                "datatype = {:#x} is predefined: gmpi keeps no attributes on predefined datatypes",
                obj.handle()
            ),
            ))
        }
    };
    if let Some(old) = old {
        run_delete(call, obj, key, &kv, old)?;
    }
    // The callback may have freed the object: look it up again.
    if let Some(m) = obj.attrs(call, &mut state())? {
        m.insert(key, val);
    }
    mark_set(obj, key);
    Ok(())
}

/// `MPI_Comm_delete_attr` / `MPI_Type_delete_attr` (nothing to do if the
/// attribute is not set).
pub fn delete(call: &str, obj: Obj, key: c_int) -> Result<(), Error> {
    let kv = keyval(call, obj.kind(), key)?;
    let val = match obj.attrs(call, &mut state())? {
        Some(m) => m.get(&key).copied(),
        None => None,
    };
    let Some(val) = val else {
        return Ok(());
    };
    run_delete(call, obj, key, &kv, val)?;
    remove(call, obj, key, val)
}

/// Take attribute `key` (if it still has value `val`) off `obj`, and let its
/// keyval go if it was freed.
fn remove(call: &str, obj: Obj, key: c_int, val: AttrVal) -> Result<(), Error> {
    let removed = match obj.attrs(call, &mut state()) {
        Ok(Some(m)) if m.get(&key) == Some(&val) => m.remove(&key).is_some(),
        _ => false,
    };
    if removed {
        unmark(obj, key);
    }
    release_if_unused(key);
    Ok(())
}

/// The static ints the predefined attributes point to.
static PREDEF_VALS: [AtomicI32; 7] = [
    AtomicI32::new(0),
    AtomicI32::new(0),
    AtomicI32::new(0),
    AtomicI32::new(0),
    AtomicI32::new(0),
    AtomicI32::new(0),
    AtomicI32::new(0),
];

/// `MPI_Comm_get_attr` / `MPI_Type_get_attr`: `*(void **)out` receives the
/// value (for a predefined attribute, a pointer to an int holding it) and
/// `*flag` whether there is one.
pub fn get(
    call: &str,
    obj: Obj,
    key: c_int,
    out: *mut c_void,
    flag: *mut c_int,
) -> Result<(), Error> {
    if out.is_null() {
        return Err(err(ErrorClass::Arg, call, "attribute_val is NULL"));
    }
    if flag.is_null() {
        return Err(err(ErrorClass::Arg, call, "flag is NULL"));
    }
    if let (Obj::Comm(h), Some((_, idx))) = (obj, predefined_keyval(key)) {
        let c = resolve::comm(call, h)?;
        let v: Option<i64> = match key {
            MPI_TAG_UB => c.get_attr(Attr::TagUb),
            MPI_HOST => c.get_attr(Attr::Host),
            MPI_IO => c.get_attr(Attr::IoRank),
            MPI_WTIME_IS_GLOBAL => c.get_attr(Attr::WtimeIsGlobal),
            MPI_UNIVERSE_SIZE => c.get_attr(Attr::UniverseSize),
            MPI_APPNUM => c.get_attr(Attr::AppNum),
            _ => Some(last_used_code() as i64),
        };
        let Some(v) = v else {
            return ptr::write(call, "flag", flag, 0);
        };
        let slot = &PREDEF_VALS[idx];
        slot.store(v as i32, Ordering::Relaxed);
        ptr::write(
            call,
            "attribute_val",
            out.cast::<*mut c_int>(),
            slot.as_ptr(),
        )?;
        return ptr::write(call, "flag", flag, 1);
    }
    keyval(call, obj.kind(), key)?;
    let val = match obj.attrs(call, &mut state())? {
        Some(m) => m.get(&key).copied(),
        None => None,
    };
    match val {
        Some(v) => {
            ptr::write(call, "attribute_val", out.cast::<usize>(), v)?;
            ptr::write(call, "flag", flag, 1)
        }
        None => ptr::write(call, "flag", flag, 0),
    }
}

// ---- whole objects ----

/// Copy the attributes of `old` onto `new` (a fresh duplicate) through the
/// keyvals' copy callbacks, in the order they were set. On an error, the
/// copies made so far are deleted again and the error returned.
pub fn copy_all(call: &str, old: Obj, new: Obj) -> Result<(), Error> {
    let entries: Vec<(c_int, AttrVal)> = match old.attrs(call, &mut state())? {
        Some(m) => m.iter().map(|(&k, &v)| (k, v)).collect(),
        None => return Ok(()),
    };
    let vals: HashMap<c_int, AttrVal> = entries.iter().copied().collect();
    let keys = in_set_order(old, entries.iter().map(|e| e.0).collect());
    for key in keys {
        let val = vals[&key];
        let Some(kv) = decode(Kind::Keyval, key).and_then(|i| state().keyvals.get(i).copied())
        else {
            continue;
        };
        let Some(f) = kv.copy else {
            continue;
        };
        match ptr::call_copy(f, old.handle(), key, kv.extra, val) {
            Ok((true, out)) => {
                if let Some(m) = new.attrs(call, &mut state())? {
                    m.insert(key, out);
                }
                mark_set(new, key);
            }
            Ok((false, _)) => {}
            Err(rc) => {
                let e = callback_error(call, "copy", key, rc);
                let _ = delete_all(call, new);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Delete every attribute of `obj`, running the delete callbacks in the
/// reverse of the order the attributes were set. Stops at the first
/// callback that fails (its attribute stays) and returns its error.
pub fn delete_all(call: &str, obj: Obj) -> Result<(), Error> {
    let entries: Vec<(c_int, AttrVal)> = match obj.attrs(call, &mut state())? {
        Some(m) => m.iter().map(|(&k, &v)| (k, v)).collect(),
        None => return Ok(()),
    };
    let vals: HashMap<c_int, AttrVal> = entries.iter().copied().collect();
    let mut keys = in_set_order(obj, entries.iter().map(|e| e.0).collect());
    keys.reverse();
    for key in keys {
        let val = vals[&key];
        let kv = decode(Kind::Keyval, key).and_then(|i| state().keyvals.get(i).copied());
        if let Some(kv) = kv {
            run_delete(call, obj, key, &kv, val)?;
        }
        remove(call, obj, key, val)?;
    }
    Ok(())
}

/// `MPI_Type_dup` and friends: copy the attributes of datatype `old` to the
/// new datatype `new`.
pub fn copy_type_attrs(old: MPI_Datatype, new: MPI_Datatype) -> Result<(), Error> {
    copy_all("MPI_Type_dup", Obj::Type(old), Obj::Type(new))
}

/// `MPI_Type_free`: delete every attribute of datatype `dt`.
pub fn delete_type_attrs(dt: MPI_Datatype) -> Result<(), Error> {
    delete_all("MPI_Type_free", Obj::Type(dt))
}

/// `MPI_Comm_dup` and `MPI_Comm_free`: the communicator versions.
pub fn copy_comm_attrs(call: &str, old: MPI_Comm, new: MPI_Comm) -> Result<(), Error> {
    copy_all(call, Obj::Comm(old), Obj::Comm(new))
}

/// Delete every attribute of communicator `comm`.
pub fn delete_comm_attrs(call: &str, comm: MPI_Comm) -> Result<(), Error> {
    delete_all(call, Obj::Comm(comm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_keyvals_are_known() {
        assert_eq!(
            predefined_keyval(MPI_TAG_UB).map(|p| p.0),
            Some("MPI_TAG_UB")
        );
        assert!(predefined_keyval(MPI_KEYVAL_INVALID).is_none());
    }
}
