//! Thin PyO3 bindings: argument conversion, error mapping, panic containment.
//! No logic lives here; each file registers one area of the core.
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

mod choose;
mod cluster;
mod collectives;
mod fast;
mod forest;
mod plan;
mod sim;
mod stats;
mod traffic;

pyo3::create_exception!(_core, VerificationError, PyValueError, "A plan breaks its collective's semantics.");

/// Map a core error to the Python exception users expect.
pub(crate) fn to_py(e: collsched_core::Error) -> PyErr {
    match e {
        collsched_core::Error::Verification(m) => VerificationError::new_err(m),
        collsched_core::Error::InvalidInput(m) | collsched_core::Error::Unsupported(m) => PyValueError::new_err(m),
    }
}

/// Run core code so that neither an error nor a panic crosses into Python raw:
/// errors become ValueError/VerificationError, panics a RuntimeError naming the bug.
pub(crate) fn guarded<T>(f: impl FnOnce() -> collsched_core::Result<T>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(to_py),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(PyRuntimeError::new_err(format!("internal error in collsched core (please report): {msg}")))
        }
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Silence the default panic message on stderr: `guarded` reports it as an exception.
    std::panic::set_hook(Box::new(|_| {}));
    m.add("VerificationError", m.py().get_type::<VerificationError>())?;
    cluster::register(m)?;
    traffic::register(m)?;
    plan::register(m)?;
    sim::register(m)?;
    stats::register(m)?;
    forest::register(m)?;
    fast::register(m)?;
    collectives::register(m)?;
    choose::register(m)?;
    Ok(())
}
