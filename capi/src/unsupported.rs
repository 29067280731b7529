//! unsupported
