//! One error type for the whole core. Bindings map `InvalidInput` to Python's
//! `ValueError` and `Verification` to `collsched.VerificationError`.
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The caller gave something malformed (a bad matrix, spec, option).
    InvalidInput(String),
    /// A plan breaks the collective's semantics; the message names the first violating transfer.
    Verification(String),
    /// Valid input that this algorithm cannot handle (a documented limit).
    Unsupported(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidInput(m) | Error::Verification(m) | Error::Unsupported(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for `Err(Error::InvalidInput(format!(...)))`.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => { Err($crate::error::Error::InvalidInput(format!($($arg)*))) };
}
