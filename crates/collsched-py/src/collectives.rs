//! Bindings for the allgather / reduce-scatter / allreduce baselines (ring, tree).
use crate::cluster::PyCluster;
use crate::guarded;
use crate::plan::PyPlan;
use collsched_core::plan::Options;
use pyo3::prelude::*;
use std::collections::BTreeMap;

/// Plan `kind` ("allgather", "reduce_scatter", "allreduce") with a baseline
/// algorithm ("ring", "tree"). `bytes` is the per-rank shard for allgather and
/// reduce-scatter, the whole buffer for allreduce.
#[pyfunction]
#[pyo3(signature = (kind, algorithm, ranks, bytes, elem_bytes=1, cluster=None, options=None))]
fn plan_collective(py: Python<'_>, kind: &str, algorithm: &str, ranks: u32, bytes: u64, elem_bytes: u32, cluster: Option<&PyCluster>, options: Option<BTreeMap<String, String>>) -> PyResult<PyPlan> {
    let opts: Options = options.unwrap_or_default();
    let c = cluster.map(|c| c.inner.clone());
    let plan = py.allow_threads(move || guarded(|| collsched_core::algo::collective::plan(kind, algorithm, ranks, bytes, elem_bytes, c.as_ref(), &opts)))?;
    Ok(PyPlan::new(plan))
}

/// `[(name, description)]` of the baseline collective algorithms.
#[pyfunction]
fn collective_algorithms() -> Vec<(String, String)> {
    collsched_core::algo::collective::COLLECTIVE_ALGORITHMS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(plan_collective, m)?)?;
    m.add_function(wrap_pyfunction!(collective_algorithms, m)?)?;
    Ok(())
}
