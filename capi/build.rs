//! Build script: give the library the SONAME of the MPICH ABI, which is what
//! binaries built against MPICH, Intel MPI or MVAPICH2 ask the loader for.
//! (The Fortran bindings are C code over these entry points; `install.sh`
//! builds them into `libmpifort.so.12` beside this library, as MPICH does.)

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.12");
    println!("cargo:rerun-if-changed=build.rs");
}
