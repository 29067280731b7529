//! The attribute entry points: keyvals (`MPI_Comm_create_keyval`,
//! `MPI_Type_create_keyval`, the deprecated `MPI_Keyval_create`), setting,
//! getting and deleting attributes on communicators and datatypes, and
//! `MPIR_Dup_fn` (MPICH's `MPI_DUP_FN`/`MPI_COMM_DUP_FN`/`MPI_TYPE_DUP_FN`).
//! The machinery, which the calls that duplicate and free objects share, is
//! in `cache.rs`.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::cache::{create_keyval, delete, free_keyval, get, set, Obj};
use crate::ptr;
use crate::resolve;
use crate::tables::AttrVal;

// ---- MPIR_Dup_fn ----

/// MPICH's `MPI_DUP_FN` (`MPI_COMM_DUP_FN`, `MPI_TYPE_DUP_FN`, `MPI_WIN_DUP_FN`
/// are casts of it): the copy callback that copies the attribute value and
/// sets `*flag = 1`. Part of the MPICH ABI: binaries reference the symbol.
///
/// # Safety
///
/// As for any copy callback: `attribute_val_out` points to a `void *` and
/// `flag` to an `int`, both writable (NULL is reported as `MPI_ERR_ARG`).
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _oldcomm: c_int,
    _keyval: c_int,
    _extra_state: *mut c_void,
    attribute_val_in: *mut c_void,
    attribute_val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    const CALL: &str = "MPIR_Dup_fn";
    let r = ptr::write(
        CALL,
        "attribute_val_out",
        attribute_val_out.cast::<*mut c_void>(),
        attribute_val_in,
    )
    .and_then(|()| ptr::write(CALL, "flag", flag, 1));
    match r {
        Ok(()) => MPI_SUCCESS,
        Err(e) => class_code(e.class()),
    }
}

// ---- entry points ----

mpi_fn! {
    fn Comm_create_keyval(comm_copy_attr_fn: Option<CopyFn>, comm_delete_attr_fn: Option<DeleteFn>, comm_keyval: *mut c_int, extra_state: *mut c_void) {
        create_keyval(CALL, Kind::Comm, comm_copy_attr_fn, comm_delete_attr_fn, comm_keyval, extra_state)
    }

    fn Comm_free_keyval(comm_keyval: *mut c_int) {
        free_keyval(CALL, Kind::Comm, comm_keyval)
    }

    fn Comm_set_attr(comm: MPI_Comm, comm_keyval: c_int, attribute_val: *mut c_void) {
        resolve::comm(CALL, comm)?;
        set(CALL, Obj::Comm(comm), comm_keyval, attribute_val as AttrVal)
    }

    fn Comm_get_attr(comm: MPI_Comm, comm_keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) {
        resolve::comm(CALL, comm)?;
        get(CALL, Obj::Comm(comm), comm_keyval, attribute_val, flag)
    }

    safe fn Comm_delete_attr(comm: MPI_Comm, comm_keyval: c_int) {
        resolve::comm(CALL, comm)?;
        delete(CALL, Obj::Comm(comm), comm_keyval)
    }

    fn Keyval_create(copy_fn: Option<CopyFn>, delete_fn: Option<DeleteFn>, keyval: *mut c_int, extra_state: *mut c_void) {
        create_keyval(CALL, Kind::Comm, copy_fn, delete_fn, keyval, extra_state)
    }

    fn Keyval_free(keyval: *mut c_int) {
        free_keyval(CALL, Kind::Comm, keyval)
    }

    fn Attr_put(comm: MPI_Comm, keyval: c_int, attribute_val: *mut c_void) {
        resolve::comm(CALL, comm)?;
        set(CALL, Obj::Comm(comm), keyval, attribute_val as AttrVal)
    }

    fn Attr_get(comm: MPI_Comm, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) {
        resolve::comm(CALL, comm)?;
        get(CALL, Obj::Comm(comm), keyval, attribute_val, flag)
    }

    safe fn Attr_delete(comm: MPI_Comm, keyval: c_int) {
        resolve::comm(CALL, comm)?;
        delete(CALL, Obj::Comm(comm), keyval)
    }

    fn Type_create_keyval(type_copy_attr_fn: Option<CopyFn>, type_delete_attr_fn: Option<DeleteFn>, type_keyval: *mut c_int, extra_state: *mut c_void) {
        create_keyval(CALL, Kind::Datatype, type_copy_attr_fn, type_delete_attr_fn, type_keyval, extra_state)
    }

    fn Type_free_keyval(type_keyval: *mut c_int) {
        free_keyval(CALL, Kind::Datatype, type_keyval)
    }

    fn Type_set_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: *mut c_void) {
        set(CALL, Obj::Type(datatype), type_keyval, attribute_val as AttrVal)
    }

    fn Type_get_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) {
        get(CALL, Obj::Type(datatype), type_keyval, attribute_val, flag)
    }

    safe fn Type_delete_attr(datatype: MPI_Datatype, type_keyval: c_int) {
        delete(CALL, Obj::Type(datatype), type_keyval)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI32, Ordering};

    use gmpi::ErrorClass;

    use super::*;
    use crate::cache::{copy_type_attrs, delete_type_attrs};
    use crate::tables::{new_type, Envelope};

    #[test]
    fn dup_fn_copies_the_pointer() {
        let mut out: usize = 0;
        let mut flag: c_int = 0;
        // SAFETY: `out` is a writable pointer-sized slot and `flag` an int.
        let rc = unsafe {
            MPIR_Dup_fn(
                0,
                0,
                std::ptr::null_mut(),
                0x1234 as *mut c_void,
                (&mut out as *mut usize).cast(),
                &mut flag,
            )
        };
        assert_eq!((rc, out, flag), (MPI_SUCCESS, 0x1234, 1));
        // SAFETY: NULL out-pointers are checked and reported; `flag` is an
        // int.
        let rc = unsafe {
            MPIR_Dup_fn(
                0,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut flag,
            )
        };
        assert_eq!(rc, class_code(ErrorClass::Arg));
    }

    static TYPE_COPIES: AtomicI32 = AtomicI32::new(0);
    static TYPE_DELETES: AtomicI32 = AtomicI32::new(0);

    unsafe extern "C" fn tcopy(
        _t: c_int,
        _k: c_int,
        _x: *mut c_void,
        inv: *mut c_void,
        out: *mut c_void,
        flag: *mut c_int,
    ) -> c_int {
        TYPE_COPIES.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `out` and `flag` are the copy callback's own arguments,
        // which the attribute cache passes as valid out-parameters.
        unsafe {
            MPIR_Dup_fn(
                0,
                0,
                std::ptr::null_mut(),
                (inv as usize + 1) as *mut c_void,
                out,
                flag,
            )
        }
    }

    unsafe extern "C" fn tdelete(_t: c_int, _k: c_int, _v: *mut c_void, _x: *mut c_void) -> c_int {
        TYPE_DELETES.fetch_add(1, Ordering::Relaxed);
        MPI_SUCCESS
    }

    fn get_val(obj: Obj, key: c_int) -> Option<usize> {
        let mut v: usize = 0;
        let mut flag: c_int = -1;
        get("t", obj, key, (&mut v as *mut usize).cast(), &mut flag).unwrap();
        (flag == 1).then_some(v)
    }

    #[test]
    fn datatype_attributes_copy_and_delete() {
        let int = || gmpi::UserDatatype::from(gmpi::Datatype::Primitive(gmpi::Primitive::I32));
        let a = new_type(int(), Envelope::default());
        let b = new_type(int(), Envelope::default());
        let mut k: c_int = 0;
        create_keyval(
            "t",
            Kind::Datatype,
            Some(tcopy),
            Some(tdelete),
            &mut k,
            std::ptr::null_mut(),
        )
        .unwrap();
        let mut ck: c_int = 0;
        create_keyval("t", Kind::Comm, None, None, &mut ck, std::ptr::null_mut()).unwrap();
        assert_eq!(
            set("t", Obj::Type(a), ck, 1).unwrap_err().class(),
            ErrorClass::Keyval
        );
        assert_eq!(get_val(Obj::Type(a), k), None);
        set("t", Obj::Type(a), k, 100).unwrap();
        set("t", Obj::Type(a), k, 200).unwrap();
        assert_eq!(TYPE_DELETES.load(Ordering::Relaxed), 1);
        assert_eq!(get_val(Obj::Type(a), k), Some(200));
        copy_type_attrs(a, b).unwrap();
        assert_eq!(TYPE_COPIES.load(Ordering::Relaxed), 1);
        assert_eq!(get_val(Obj::Type(b), k), Some(201));
        // Freed keyval: stays while attached, goes with the last attribute.
        let mut k2 = k;
        free_keyval("t", Kind::Datatype, &mut k2).unwrap();
        assert_eq!(k2, MPI_KEYVAL_INVALID);
        assert_eq!(get_val(Obj::Type(a), k), Some(200));
        delete_type_attrs(a).unwrap();
        assert_eq!(get_val(Obj::Type(b), k), Some(201));
        delete_type_attrs(b).unwrap();
        assert_eq!(TYPE_DELETES.load(Ordering::Relaxed), 3);
        assert_eq!(get_val_err(Obj::Type(b), k), ErrorClass::Keyval);
        assert_eq!(
            set("t", Obj::Type(MPI_INT), ck, 1).unwrap_err().class(),
            ErrorClass::Keyval
        );
    }

    fn get_val_err(obj: Obj, key: c_int) -> ErrorClass {
        let mut v: usize = 0;
        let mut flag: c_int = 0;
        get("t", obj, key, (&mut v as *mut usize).cast(), &mut flag)
            .unwrap_err()
            .class()
    }
}
