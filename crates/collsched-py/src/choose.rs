//! `choose` (auto's closed-form decision) and the backend calibration table.
use crate::cluster::PyCluster;
use crate::guarded;
use collsched_core::algo::auto::{self, Calibration};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Backend constants `choose` charges (parsed and checked once; see `calibration.json`).
#[pyclass(module = "collsched._core", name = "Calibration", frozen)]
pub struct PyCalibration {
    inner: Calibration,
}

#[pymethods]
impl PyCalibration {
    /// The built-in defaults.
    #[staticmethod]
    fn defaults() -> PyCalibration {
        PyCalibration { inner: Calibration::defaults().clone() }
    }
    /// Parse and check a calibration (raises ValueError naming the bad field).
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<PyCalibration> {
        Ok(PyCalibration { inner: guarded(|| Calibration::from_json(text))? })
    }
    fn to_json(&self) -> String {
        self.inner.to_json()
    }
    /// 16 hex digits; ranks compare it so that all choose with the same constants.
    #[getter]
    fn digest(&self) -> String {
        format!("{:016x}", self.inner.digest())
    }
    #[getter]
    fn backends(&self) -> Vec<String> {
        self.inner.backends.keys().cloned().collect()
    }
    #[getter]
    fn source(&self) -> String {
        self.inner.source.clone()
    }
}

/// `(algorithm, predicted_s, [(name, total_s, transfer_s, overhead_s)])` for the `n × n`
/// little-endian u64 matrix `matrix`.
#[pyfunction]
#[pyo3(signature = (n, matrix, cluster, backend, calibration, candidates=None))]
#[allow(clippy::type_complexity)]
fn choose(py: Python<'_>, n: usize, matrix: &Bound<'_, PyBytes>, cluster: &PyCluster, backend: &str, calibration: &PyCalibration, candidates: Option<&str>) -> PyResult<(String, f64, Vec<(String, f64, f64, f64)>)> {
    let bytes = matrix.as_bytes();
    let c = guarded(|| {
        let mask = auto::candidate_mask(candidates)?;
        py.allow_threads(|| auto::choose_le_bytes(bytes, n, &cluster.inner, &calibration.inner, backend, &mask))
    })?;
    let cands = c.candidates.iter().map(|p| (p.name.to_string(), p.total_s, p.transfer_s, p.overhead_s)).collect();
    Ok((c.algorithm.to_string(), c.predicted_s, cands))
}

/// Every candidate `choose` considers, in tie-breaking order.
#[pyfunction]
fn auto_candidates() -> Vec<&'static str> {
    auto::CANDIDATES.to_vec()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCalibration>()?;
    m.add_function(wrap_pyfunction!(choose, m)?)?;
    m.add_function(wrap_pyfunction!(auto_candidates, m)?)?;
    Ok(())
}
