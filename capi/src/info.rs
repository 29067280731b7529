//! Info objects: ordered (key, value) lists of strings.
//!
//! `MPI_Info_create`, `_free`, `_dup`, `_set`, `_delete`, `_get`,
//! `_get_valuelen`, `_get_nkeys`, `_get_nthkey`, `_get_string` (MPI-4) and
//! `_create_env` (MPI-4), and the predefined `MPI_INFO_ENV`, a read-only
//! object whose contents are those `MPI_Info_create_env` gives.
//!
//! A user info object ([`InfoObj`], in `tables/`) is a slot of
//! `state().infos`, its handle `encode(Kind::Info, slot)`. Keys keep the
//! order of their first insertion (`MPI_Info_get_nthkey`); setting a key
//! again replaces its value in place.
//! As MPI-4 allows, every info call works before `MPI_Init` and after
//! `MPI_Finalize`.

use std::ffi::{c_char, c_int};

use gmpi::{Error, ErrorClass};

use crate::abi::{
    decode, Kind, MPI_Info, MPI_INFO_ENV, MPI_INFO_NULL, MPI_MAX_INFO_KEY, MPI_MAX_INFO_VAL,
};
use crate::ptr;
use crate::tables::{err, new_info, state, InfoObj, WORLD};

/// A copy of the info object `h` (`MPI_INFO_ENV` included); `MPI_ERR_INFO`
/// for `MPI_INFO_NULL` or a handle that names no info object.
pub fn lookup(call: &str, h: MPI_Info) -> Result<InfoObj, Error> {
    if h == MPI_INFO_ENV {
        return Ok(env_info(None));
    }
    if h == MPI_INFO_NULL {
        return Err(err(ErrorClass::Info, call, "info is MPI_INFO_NULL"));
    }
    decode(Kind::Info, h)
        .and_then(|i| state().infos.get(i).cloned())
        .ok_or_else(|| invalid(call, "info", h))
}

fn invalid(call: &str, what: &str, h: MPI_Info) -> Error {
    err(
        ErrorClass::Info,
        call,
        format!("{what} = {h:#x} is not a valid info object"),
    )
}

/// Run `f` on the user info object `h` (not `MPI_INFO_ENV`, which is
/// read-only).
fn with_info<R>(call: &str, h: MPI_Info, f: impl FnOnce(&mut InfoObj) -> R) -> Result<R, Error> {
    if h == MPI_INFO_ENV {
        return Err(err(
            ErrorClass::Info,
            call,
            "info is MPI_INFO_ENV, which is read-only (MPI_Info_dup it to get a copy to modify)",
        ));
    }
    if h == MPI_INFO_NULL {
        return Err(err(ErrorClass::Info, call, "info is MPI_INFO_NULL"));
    }
    let mut st = state();
    match decode(Kind::Info, h).and_then(|i| st.infos.get_mut(i)) {
        Some(o) => Ok(f(o)),
        None => Err(invalid(call, "info", h)),
    }
}

/// Read and check the key argument.
fn key_arg(call: &str, key: *const c_char) -> Result<String, Error> {
    let k = ptr::cstr(call, "key", key)?;
    if k.is_empty() {
        return Err(err(ErrorClass::InfoKey, call, "key is empty"));
    }
    if k.len() > MPI_MAX_INFO_KEY {
        return Err(err(
            ErrorClass::InfoKey,
            call,
            format!(
                "key is {} characters long (MPI_MAX_INFO_KEY is {MPI_MAX_INFO_KEY})",
                k.len()
            ),
        ));
    }
    Ok(k)
}

/// Copy `s` into the caller's buffer `p` of `n + 1` bytes: at most `n`
/// characters, then a NUL.
fn copy_out(call: &str, what: &str, p: *mut c_char, n: usize, s: &str) -> Result<(), Error> {
    let m = s.len().min(n);
    let out = ptr::slice_mut(call, what, p.cast::<u8>(), m + 1)?;
    out[..m].copy_from_slice(&s.as_bytes()[..m]);
    out[m] = 0;
    Ok(())
}

/// What `MPI_Info_create_env` reports: the command and its arguments (from
/// `argv` when the caller passes them, else from this process's command
/// line), the working directory, the host, the architecture, the thread
/// level, and the number of processes once MPI is initialized.
fn env_info(argv: Option<Vec<String>>) -> InfoObj {
    let args = argv.unwrap_or_else(|| std::env::args().collect());
    let mut o = InfoObj::default();
    if let Some((cmd, rest)) = args.split_first() {
        o.set("command", cmd);
        if !rest.is_empty() {
            o.set("argv", &rest.join(" "));
        }
    }
    if let Some(w) = WORLD.get() {
        o.set("maxprocs", &w.size().to_string());
    }
    o.set("host", &gmpi::processor_name());
    o.set("arch", std::env::consts::ARCH);
    if let Ok(d) = std::env::current_dir() {
        o.set("wdir", &d.to_string_lossy());
    }
    o.set("thread_level", crate::env::thread_level_name());
    o
}

mpi_fn! {
    noinit fn Info_create(info: *mut MPI_Info) {
        if info.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "info is NULL"));
        }
        ptr::write(CALL, "info", info, new_info(InfoObj::default()))
    }

    noinit fn Info_create_env(argc: c_int, argv: *mut *mut c_char, info: *mut MPI_Info) {
        if info.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "info is NULL"));
        }
        let n = ptr::len(CALL, "argc", argc)?;
        let args = if n > 0 && !argv.is_null() {
            let ps = ptr::slice(CALL, "argv", argv.cast_const(), n)?;
            let mut v = Vec::with_capacity(n);
            for (i, &p) in ps.iter().enumerate() {
                if p.is_null() {
                    break;
                }
                v.push(ptr::cstr(CALL, &format!("argv[{i}]"), p)?);
            }
            Some(v)
        } else {
            None
        };
        ptr::write(CALL, "info", info, new_info(env_info(args)))
    }

    noinit fn Info_free(info: *mut MPI_Info) {
        let h = ptr::read(CALL, "info", info)?;
        if h == MPI_INFO_ENV {
            return Err(err(ErrorClass::Info, CALL, "info is MPI_INFO_ENV, a predefined object that cannot be freed"));
        }
        if h == MPI_INFO_NULL {
            return Err(err(ErrorClass::Info, CALL, "info is MPI_INFO_NULL"));
        }
        let freed = decode(Kind::Info, h).and_then(|i| state().infos.remove(i));
        if freed.is_none() {
            return Err(invalid(CALL, "info", h));
        }
        ptr::write(CALL, "info", info, MPI_INFO_NULL)
    }

    noinit fn Info_dup(info: MPI_Info, newinfo: *mut MPI_Info) {
        let o = lookup(CALL, info)?;
        if newinfo.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "newinfo is NULL"));
        }
        ptr::write(CALL, "newinfo", newinfo, new_info(o))
    }

    noinit fn Info_set(info: MPI_Info, key: *const c_char, value: *const c_char) {
        let k = key_arg(CALL, key)?;
        let v = ptr::cstr(CALL, "value", value)?;
        if v.len() > MPI_MAX_INFO_VAL {
            return Err(err(ErrorClass::InfoValue, CALL, format!("value is {} characters long (MPI_MAX_INFO_VAL is {MPI_MAX_INFO_VAL})", v.len())));
        }
        with_info(CALL, info, |o| o.set(&k, &v))
    }

    noinit fn Info_delete(info: MPI_Info, key: *const c_char) {
        let k = key_arg(CALL, key)?;
        if !with_info(CALL, info, |o| o.delete(&k))? {
            return Err(err(ErrorClass::InfoNokey, CALL, format!("key \"{k}\" is not set in info")));
        }
        Ok(())
    }

    noinit fn Info_get(info: MPI_Info, key: *const c_char, valuelen: c_int, value: *mut c_char, flag: *mut c_int) {
        let o = lookup(CALL, info)?;
        let k = key_arg(CALL, key)?;
        let n = ptr::len(CALL, "valuelen", valuelen)?;
        if flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag is NULL"));
        }
        match o.get(&k) {
            Some(v) => {
                copy_out(CALL, "value", value, n, v)?;
                ptr::write(CALL, "flag", flag, 1)
            }
            None => ptr::write(CALL, "flag", flag, 0),
        }
    }

    noinit fn Info_get_valuelen(info: MPI_Info, key: *const c_char, valuelen: *mut c_int, flag: *mut c_int) {
        let o = lookup(CALL, info)?;
        let k = key_arg(CALL, key)?;
        if valuelen.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "valuelen is NULL"));
        }
        match o.get(&k) {
            Some(v) => {
                ptr::write(CALL, "flag", flag, 1)?;
                ptr::write(CALL, "valuelen", valuelen, v.len() as c_int)
            }
            None => ptr::write(CALL, "flag", flag, 0),
        }
    }

    noinit fn Info_get_nkeys(info: MPI_Info, nkeys: *mut c_int) {
        let o = lookup(CALL, info)?;
        ptr::write(CALL, "nkeys", nkeys, o.entries.len() as c_int)
    }

    noinit fn Info_get_nthkey(info: MPI_Info, n: c_int, key: *mut c_char) {
        let o = lookup(CALL, info)?;
        let nkeys = o.entries.len();
        let Some((k, _)) = usize::try_from(n).ok().and_then(|i| o.entries.get(i)) else {
            return Err(err(ErrorClass::Arg, CALL, format!("n = {n} is not in [0, {nkeys}) (the number of keys)")));
        };
        copy_out(CALL, "key", key, MPI_MAX_INFO_KEY, k)
    }

    noinit fn Info_get_string(info: MPI_Info, key: *const c_char, buflen: *mut c_int, value: *mut c_char, flag: *mut c_int) {
        let o = lookup(CALL, info)?;
        let k = key_arg(CALL, key)?;
        let len = ptr::read(CALL, "buflen", buflen.cast_const())?;
        let n = ptr::len(CALL, "*buflen", len)?;
        if flag.is_null() {
            return Err(err(ErrorClass::Arg, CALL, "flag is NULL"));
        }
        match o.get(&k) {
            Some(v) => {
                if n > 0 {
                    copy_out(CALL, "value", value, n - 1, v)?;
                }
                let need = c_int::try_from(v.len() + 1).unwrap_or(c_int::MAX);
                ptr::write(CALL, "buflen", buflen, need)?;
                ptr::write(CALL, "flag", flag, 1)
            }
            None => ptr::write(CALL, "flag", flag, 0),
        }
    }
}
