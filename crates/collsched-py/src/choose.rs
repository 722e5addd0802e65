//! `choose` (auto's closed-form decision) and the backend calibration table.
use crate::cluster::PyCluster;
use crate::guarded;
use collsched_core::algo::auto::{self, Calibration};
use crate::plan::rank_plan::{in_workspace, PyRankPlan, PyWorkspace};
use collsched_core::plan::Options;
use pyo3::prelude::*;
use numpy::{PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;

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

/// `(algorithm, predicted_s, [(name, total_s, transfer_s, overhead_s)])` for the P×P
/// C-contiguous uint64 numpy matrix `matrix`, read in place (no copy).
#[pyfunction]
#[pyo3(signature = (matrix, cluster, backend, calibration, candidates=None))]
fn choose(py: Python<'_>, matrix: PyReadonlyArray2<'_, u64>, cluster: &PyCluster, backend: &str, calibration: &PyCalibration, candidates: Option<&str>) -> PyResult<ChoiceTuple> {
    let (n, data) = square(&matrix)?;
    let c = guarded(|| {
        let mask = auto::candidate_mask(candidates)?;
        py.allow_threads(|| auto::choose(data, n, &cluster.inner, &calibration.inner, backend, &mask))
    })?;
    Ok(choice_tuple(&c))
}

/// The entries of a square C-contiguous matrix, in place.
fn square<'a>(matrix: &'a PyReadonlyArray2<'_, u64>) -> PyResult<(usize, &'a [u64])> {
    let shape = matrix.shape();
    if shape[0] != shape[1] || shape[0] == 0 {
        return Err(PyValueError::new_err(format!("traffic matrix must be square P×P with P ≥ 1, got shape ({}, {})", shape[0], shape[1])));
    }
    // `as_slice` also takes Fortran order, which would read the matrix transposed.
    match matrix.as_slice() {
        Ok(data) if matrix.is_c_contiguous() => Ok((shape[0], data)),
        _ => Err(PyValueError::new_err("traffic matrix must be C-contiguous (np.ascontiguousarray)")),
    }
}

/// The content hash of a square uint64 matrix (`Traffic::hash`: its size and entries), read
/// in place: the runtime's cache key and the digest ranks compare.
#[pyfunction]
fn matrix_hash(py: Python<'_>, matrix: PyReadonlyArray2<'_, u64>) -> PyResult<u64> {
    let (n, data) = square(&matrix)?;
    Ok(py.allow_threads(|| {
        let mut h = collsched_core::plan::hash::Fnv64::new();
        h.write_u64(n as u64);
        h.write_u64s(data);
        h.finish()
    }))
}

type ChoiceTuple = (String, f64, Vec<(String, f64, f64, f64)>);

fn choice_tuple(c: &auto::Choice) -> ChoiceTuple {
    let cands = c.candidates.iter().map(|p| (p.name.to_string(), p.total_s, p.transfer_s, p.overhead_s)).collect();
    (c.algorithm.to_string(), c.predicted_s, cands)
}

/// Whether two square uint64 matrices are equal, read in place (the cache confirms a hit by
/// it: numpy's `array_equal` first builds a boolean array of P² entries).
#[pyfunction]
fn matrices_equal(py: Python<'_>, a: PyReadonlyArray2<'_, u64>, b: PyReadonlyArray2<'_, u64>) -> PyResult<bool> {
    let ((n, x), (m, y)) = (square(&a)?, square(&b)?);
    Ok(n == m && py.allow_threads(|| x == y))
}

/// auto on the runtime's path, from the uint64 numpy `matrix` read in place: choose (with `backend` of
/// `calibration`, among `candidates`), then expand the winner's part for `rank` (nothing when
/// `native` wins: the runtime calls torch). The choice reads the matrix in place; the
/// expansion reads one copy of it. Returns `(choice, RankPlan | None, choose_ns, decide_ns, expand_ns)`,
/// `choice` as `choose` returns it; `decide_ns` includes `choose_ns`.
#[pyfunction]
#[pyo3(signature = (matrix, cluster, rank, backend, calibration, candidates=None, workspace=None, moving_pairs=false))]
#[allow(clippy::too_many_arguments)]
fn plan_auto_for_rank(py: Python<'_>, matrix: PyReadonlyArray2<'_, u64>, cluster: &PyCluster, rank: u32, backend: &str, calibration: &PyCalibration, candidates: Option<&str>, workspace: Option<&PyWorkspace>, moving_pairs: bool) -> PyResult<(ChoiceTuple, Option<PyRankPlan>, u64, u64, u64)> {
    let mut opts = Options::new();
    opts.insert("backend".into(), backend.into());
    if let Some(c) = candidates {
        opts.insert("candidates".into(), c.into());
    }
    let (n, data) = square(&matrix)?;
    let c = &cluster.inner;
    let rc = py.allow_threads(|| {
        guarded(|| {
            // Read in place; copied once into a `Traffic` only if a plan is expanded.
            in_workspace(workspace, |ws| auto::plan_rank(ws, data, n, None, c, rank, &opts, Some(&calibration.inner), false, moving_pairs))
        })
    })?;
    Ok((choice_tuple(&rc.choice), rc.plan.map(|inner| PyRankPlan { inner }), rc.choose_ns, rc.times.decide_ns, rc.times.expand_ns))
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
    m.add_function(wrap_pyfunction!(plan_auto_for_rank, m)?)?;
    m.add_function(wrap_pyfunction!(matrix_hash, m)?)?;
    m.add_function(wrap_pyfunction!(matrices_equal, m)?)?;
    Ok(())
}
