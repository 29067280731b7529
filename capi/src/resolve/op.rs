//! Reduction operations by handle.

use gmpi::{Error, ErrorClass, Op, UserDatatype};

use crate::abi::*;
use crate::ptr;
use crate::resolve::extops;
use crate::tables::{err, state, OpObj};

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
        if let Some(r) = extops::predefined_op(call, h, dt_h) {
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
    Ok(wrap_user_op(obj, dt_h, dt.clone()))
}

/// The predefined arithmetic or logical operation `h` (`MPI_MAX` ..
/// `MPI_BXOR`) as [`op`] returns it for the predefined datatype `dt_h`,
/// when no extension kernel takes over (the complex, long double and pair
/// types of extops.rs): the look-up of the collective hot path, with no
/// error (`None` sends the caller to [`op`], which checks it in full).
#[inline]
pub fn fast_op(h: MPI_Op, dt_h: MPI_Datatype) -> Option<Op> {
    if extops::is_ext_type(dt_h) {
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

/// A user operation as the runtime calls it, `(invec, inoutvec, count)` on
/// packed data: the C function gets the data in the datatype's own layout
/// (unpacked into temporaries when the type has holes) and the handle.
pub fn wrap_user_op(o: OpObj, dt_h: MPI_Datatype, dt: UserDatatype) -> Op {
    let dense =
        dt.true_lb() == 0 && dt.extent() == dt.size() as isize && dt.true_extent() == dt.extent();
    let f = o.f;
    Op::user(
        move |a: &[u8], b: &mut [u8], n: usize| {
            let ext = dt.extent().unsigned_abs();
            if dense || n == 0 {
                ptr::call_user_op(f, a.as_ptr() as *mut u8, b.as_mut_ptr(), n, ext, dt_h);
                return;
            }
            // Lay both operands out as `n` elements of the type.
            let origin = (-dt.true_lb()).max(0) as usize;
            let span = origin + (dt.true_lb() + dt.true_extent()).max(0) as usize + (n - 1) * ext;
            let mut ta = vec![0u8; span];
            let mut tb = vec![0u8; span];
            let ok = dt.unpack(n, a, &mut ta, origin).is_ok()
                && dt.unpack(n, b, &mut tb, origin).is_ok();
            if !ok {
                return;
            }
            ptr::call_user_op(
                f,
                ta[origin..].as_mut_ptr(),
                tb[origin..].as_mut_ptr(),
                n,
                ext,
                dt_h,
            );
            if let Ok(packed) = dt.pack(n, &tb, origin) {
                b.copy_from_slice(&packed);
            }
        },
        o.commutative,
    )
}
