//! Bindings for FAST's extras: the worst-case bound and the stage decomposition.
use crate::cluster::PyCluster;
use crate::guarded;
use collsched_core::algo::fast;
use pyo3::prelude::*;

/// FAST's guaranteed ratio of completion time to the optimum on `cluster` (appendix A,
/// Theorem 3 generalised to stage order and fabric; bandwidth terms only).
#[pyfunction]
fn fast_worst_case_ratio(cluster: &PyCluster) -> f64 {
    fast::worst_case_ratio(&cluster.inner)
}

/// The paper's Theorem 3 ratio 1 + (B2/B1)(m + m/n), for comparison.
#[pyfunction]
fn fast_theorem3_ratio(cluster: &PyCluster) -> f64 {
    fast::bound::theorem3_ratio(&cluster.inner)
}

/// Decompose an N×N server matrix (row-major little-endian u64 bytes) into one-to-one
/// stages in plan order: `[(perm, real_bytes_per_server, exact)]`.
#[pyfunction]
#[pyo3(signature = (n, data, min_stage_bytes=0, exact=false))]
fn fast_server_stages(py: Python<'_>, n: usize, data: &[u8], min_stage_bytes: u64, exact: bool) -> PyResult<Vec<(Vec<u32>, Vec<u64>, bool)>> {
    let data = data.to_vec();
    py.allow_threads(move || {
        guarded(|| {
            let t = collsched_core::Traffic::from_le_bytes(n, &data)?;
            let mut m = t.data().to_vec();
            for s in 0..n {
                if m[s * n + s] != 0 {
                    return collsched_core::invalid!("server matrix diagonal must be zero (entry {s},{s} is {})", m[s * n + s]);
                }
                m[s * n + s] = 0;
            }
            let dec = fast::plan_stages(&m, n, min_stage_bytes, exact);
            let stages = fast::order_stages(dec, &m, n, false);
            Ok(stages.into_iter().map(|s| (s.perm, s.real, s.exact)).collect())
        })
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fast_worst_case_ratio, m)?)?;
    m.add_function(wrap_pyfunction!(fast_theorem3_ratio, m)?)?;
    m.add_function(wrap_pyfunction!(fast_server_stages, m)?)?;
    Ok(())
}
