//! Bindings for skew statistics: SABRE's MTM ratios and the Gini coefficient.
use crate::cluster::PyCluster;
use crate::guarded;
use collsched_core::traffic::stats;
use collsched_core::Traffic;
use pyo3::prelude::*;

/// `(send, recv, overall)` MTM ratios of a row-major little-endian u64 matrix, plus
/// the exact overall ratio in thousandths (rounded down) for integer comparisons.
#[pyfunction]
fn skew_mtm(py: Python<'_>, n: usize, data: &[u8], cluster: &PyCluster) -> PyResult<(f64, f64, f64, u64)> {
    let data = data.to_vec();
    let c = cluster.inner.clone();
    py.allow_threads(move || {
        guarded(|| {
            let t = Traffic::from_le_bytes(n, &data)?;
            let m = stats::mtm(&t, &c)?;
            let o = m.overall();
            Ok((m.send.to_f64(), m.recv.to_f64(), o.to_f64(), o.milli().min(u64::MAX as u128) as u64))
        })
    })
}

/// Gini coefficient of all P×P pair sizes.
#[pyfunction]
fn skew_gini(n: usize, data: &[u8]) -> PyResult<f64> {
    guarded(|| Ok(stats::gini(&Traffic::from_le_bytes(n, data)?)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(skew_mtm, m)?)?;
    m.add_function(wrap_pyfunction!(skew_gini, m)?)?;
    Ok(())
}
