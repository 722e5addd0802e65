//! Bindings for the simulator and the lower bound. `collsched.sim` wraps the
//! dicts in dataclasses and turns the per-transfer time bytes into numpy.
use crate::cluster::PyCluster;
use crate::guarded;
use crate::plan::PyPlan;
use collsched_core::bound::Bound as LowerBound;
use collsched_core::sim::{simulate as core_simulate, Incast, Model, SimOptions, DEFAULT_TOLERANCE};
use collsched_core::Traffic;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

fn bound_dict<'py>(py: Python<'py>, b: &LowerBound) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("seconds", b.seconds)?;
    d.set_item("term", &b.term)?;
    let terms = PyDict::new(py);
    for (k, v) in &b.terms {
        terms.set_item(k, *v)?;
    }
    d.set_item("terms", terms)?;
    Ok(d)
}

fn le_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Lower bound of an all-to-all(v); `data` is the row-major little-endian u64 matrix.
#[pyfunction]
fn lower_bound<'py>(py: Python<'py>, n: usize, data: &[u8], cluster: &PyCluster) -> PyResult<Bound<'py, PyDict>> {
    let c = cluster.inner.clone();
    let data = data.to_vec();
    let b = py.allow_threads(move || guarded(|| collsched_core::bound::lower_bound(&Traffic::from_le_bytes(n, &data)?, &c)))?;
    bound_dict(py, &b)
}

/// Simulate a plan. Per-transfer start/end times come back as little-endian f64 bytes.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // one per Python keyword
#[pyo3(signature = (plan, cluster, barrier_steps=false, tolerance=DEFAULT_TOLERANCE, incast_threshold=None, incast_goodput=0.5, warm_connections=false, core_bw=None, model="hardware"))]
fn simulate<'py>(
    py: Python<'py>,
    plan: &PyPlan,
    cluster: &PyCluster,
    barrier_steps: bool,
    tolerance: f64,
    incast_threshold: Option<u32>,
    incast_goodput: f64,
    warm_connections: bool,
    core_bw: Option<f64>,
    model: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let incast = incast_threshold.map(|threshold| Incast { threshold, goodput: incast_goodput });
    let model = guarded(|| Model::parse(model))?;
    let opts = SimOptions { model, barrier_steps, tolerance, incast, warm_connections, core_bw };
    let c = &cluster.inner;
    let p = &plan.inner;
    let r = py.allow_threads(|| guarded(|| core_simulate(p, c, &opts)))?;
    let d = PyDict::new(py);
    d.set_item("time_s", r.time_s)?;
    d.set_item("transfers", r.transfers)?;
    d.set_item("bytes_moved", r.bytes_moved)?;
    d.set_item("bytes_per_rank", r.bytes_per_rank)?;
    d.set_item("algbw", r.algbw)?;
    d.set_item("busbw", r.busbw)?;
    match &r.lower_bound {
        Some(b) => d.set_item("lower_bound", bound_dict(py, b)?)?,
        None => d.set_item("lower_bound", py.None())?,
    }
    d.set_item("ratio_to_bound", r.ratio_to_bound)?;
    d.set_item("transfer_start", PyBytes::new(py, &le_bytes(&r.transfer_start)))?;
    d.set_item("transfer_end", PyBytes::new(py, &le_bytes(&r.transfer_end)))?;
    let steps = PyList::empty(py);
    for s in &r.steps {
        steps.append((s.first_start, s.last_end, s.transfers))?;
    }
    d.set_item("steps", steps)?;
    let links = PyDict::new(py);
    for u in &r.links {
        let e = PyDict::new(py);
        e.set_item("links", u.links)?;
        e.set_item("bytes", u.bytes)?;
        e.set_item("utilisation", u.utilisation)?;
        e.set_item("busiest_link", &u.busiest_link)?;
        e.set_item("busiest_utilisation", u.busiest_utilisation)?;
        links.set_item(u.class.name(), e)?;
    }
    d.set_item("link_utilisation", links)?;
    d.set_item("scaleout_bytes", r.scaleout_bytes)?;
    d.set_item("windows", r.windows)?;
    d.set_item("recomputations", r.recomputations)?;
    Ok(d)
}

pub fn register(m: &pyo3::Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(lower_bound, m)?)?;
    Ok(())
}
