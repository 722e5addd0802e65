//! Per-rank planning: `plan_for_rank` and the `RankPlan` it returns (also what
//! `Plan.rank_plan` cuts from a whole plan). Declared from `plan.rs`, which registers it.
use super::{segment_rows, transfer_rows, u32_rows};
use crate::cluster::PyCluster;
use crate::guarded;
use collsched_core::plan::rank_plan::RankPlan;
use collsched_core::plan::Options;
use collsched_core::Traffic;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Planning's working memory, kept by a caller that plans repeatedly (the runtime's plan
/// cache keeps one): reusing it instead of faulting in fresh pages per plan makes FAST's
/// balancing 2–4× faster at 320 GPUs. A call that finds it in use plans in fresh memory.
#[pyclass(module = "collsched._core", name = "Workspace", frozen)]
#[derive(Default)]
pub struct PyWorkspace {
    inner: Mutex<collsched_core::algo::Workspace>,
}

#[pymethods]
impl PyWorkspace {
    #[new]
    fn new() -> PyWorkspace {
        PyWorkspace::default()
    }
}

/// One rank's part of an all-to-all plan: its transfers in the whole plan's order, each
/// with its tag (its sequence number among the rank's transfers with the same ordered
/// (src, dst) pair), this rank's side of its segments, and its deps as rows; its buffer
/// sizes, the whole plan's per-step moving pairs when counted, and the decisions' digest.
#[pyclass(module = "collsched._core", name = "RankPlan", frozen, eq)]
#[derive(PartialEq)]
pub struct PyRankPlan {
    pub inner: RankPlan,
}

#[pymethods]
impl PyRankPlan {
    /// The producer that made the decisions (for `auto`, the candidate it chose).
    #[getter]
    fn algorithm(&self) -> String {
        self.inner.algorithm.clone()
    }
    #[getter]
    fn rank(&self) -> u32 {
        self.inner.rank
    }
    #[getter]
    fn num_ranks(&self) -> u32 {
        self.inner.num_ranks
    }
    #[getter]
    fn gpus_per_server(&self) -> u32 {
        self.inner.gpus_per_server
    }
    /// Digest of the decisions and inputs as 16 hex digits; ranks compare it before moving data.
    #[getter]
    fn digest(&self) -> String {
        format!("{:016x}", self.inner.digest)
    }
    #[getter]
    fn input_bytes(&self) -> u64 {
        self.inner.input_bytes
    }
    #[getter]
    fn output_bytes(&self) -> u64 {
        self.inner.output_bytes
    }
    #[getter]
    fn scratch_bytes(&self) -> u64 {
        self.inner.scratch_bytes
    }
    /// What the plan computes: always "all_to_all" (per-rank planning is for all-to-all).
    #[getter]
    fn collective(&self) -> &'static str {
        "all_to_all"
    }
    /// Bytes the rank's transfer, segment and dependency rows take in memory.
    #[getter]
    fn nbytes(&self) -> usize {
        use std::mem::size_of;
        let v = &self.inner;
        v.transfers.len() * (size_of::<collsched_core::plan::Transfer>() + 4) + v.segments.len() * size_of::<collsched_core::plan::Segment>() + 4 * v.deps.len()
    }
    #[getter]
    fn num_transfers(&self) -> usize {
        self.inner.transfers.len()
    }
    /// Per transfer, its tag: its sequence number among this rank's transfers with the same
    /// ordered (src, dst) pair (what both sides of a message compute alike).
    #[getter]
    fn tags(&self) -> Vec<u32> {
        self.inner.tags.clone()
    }
    /// `[(step, distinct moving rank pairs)]` of the whole plan; None when not counted
    /// (`plan_for_rank(..., moving_pairs=True)` counts them).
    #[getter]
    fn moving_pairs(&self) -> Option<Vec<(u32, u32)>> {
        self.inner.moving_pairs.clone()
    }
    /// The rows as little-endian bytes, as `Plan._raw_arrays` lays them out: "tags",
    /// "transfers" (segment and dep ranges into "segments" and "deps"), "segments", "deps"
    /// (rows), "moving_pairs" ((step, pairs) u32 pairs, or None) and "sizes" (input, output,
    /// scratch).
    fn _rows<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let v = &self.inner;
        let d = PyDict::new(py);
        d.set_item("tags", PyBytes::new(py, &u32_rows(&v.tags)))?;
        d.set_item("transfers", PyBytes::new(py, &transfer_rows(&v.transfers)))?;
        d.set_item("segments", PyBytes::new(py, &segment_rows(&v.segments)))?;
        d.set_item("deps", PyBytes::new(py, &u32_rows(&v.deps)))?;
        let flat = v.moving_pairs.as_ref().map(|m| m.iter().flat_map(|&(s, k)| [s, k]).collect::<Vec<u32>>());
        d.set_item("moving_pairs", flat.map(|f| PyBytes::new(py, &u32_rows(&f))))?;
        d.set_item("sizes", (v.input_bytes, v.output_bytes, v.scratch_bytes))?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        let v = &self.inner;
        format!("RankPlan({} rank {} of {}: {} transfers, digest {:016x})", v.algorithm, v.rank, v.num_ranks, v.transfers.len(), v.digest)
    }
}

/// `rank`'s part of the all-to-all plan of the row-major little-endian u64 matrix `data`,
/// with the nanoseconds spent deciding and expanding: `(RankPlan, decide_ns, expand_ns)`.
/// `workspace`: working memory to reuse (see `Workspace`); `moving_pairs`: also count the
/// whole plan's moving pairs (the collective transports need them).
#[pyfunction]
#[pyo3(signature = (n, data, cluster, rank, algorithm, options=None, workspace=None, moving_pairs=false))]
#[allow(clippy::too_many_arguments)]
fn plan_for_rank(py: Python<'_>, n: usize, data: &[u8], cluster: &PyCluster, rank: u32, algorithm: &str, options: Option<BTreeMap<String, String>>, workspace: Option<&PyWorkspace>, moving_pairs: bool) -> PyResult<(PyRankPlan, u64, u64)> {
    let opts: Options = options.unwrap_or_default();
    let c = &cluster.inner;
    let (rp, times) = py.allow_threads(|| {
        guarded(|| {
            let t = Traffic::from_le_bytes(n, data)?;
            in_workspace(workspace, |ws| collsched_core::algo::plan_for_rank_in(ws, &t, c, rank, algorithm, &opts, moving_pairs))
        })
    })?;
    Ok((PyRankPlan { inner: rp }, times.decide_ns, times.expand_ns))
}

/// Run `f` in `workspace` when given and free, else in fresh working memory (a call that
/// finds it in use, e.g. by the prefetch thread, does not wait). A workspace poisoned by a
/// panic is still only memory: every plan refills it.
pub(crate) fn in_workspace<T>(workspace: Option<&PyWorkspace>, f: impl FnOnce(&mut collsched_core::algo::Workspace) -> T) -> T {
    let held = workspace.map(|w| {
        w.inner.try_lock().or_else(|e| match e {
            std::sync::TryLockError::Poisoned(p) => Ok(p.into_inner()),
            std::sync::TryLockError::WouldBlock => Err(()),
        })
    });
    match held {
        Some(Ok(mut ws)) => f(&mut ws),
        _ => f(&mut collsched_core::algo::Workspace::default()),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRankPlan>()?;
    m.add_class::<PyWorkspace>()?;
    m.add_function(wrap_pyfunction!(plan_for_rank, m)?)?;
    Ok(())
}
