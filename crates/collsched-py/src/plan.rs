use crate::cluster::PyCluster;
use crate::guarded;
use collsched_core::plan::Options;
use collsched_core::{Plan, Traffic};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::BTreeMap;
use std::sync::OnceLock;

#[path = "rank_plan.rs"]
pub(crate) mod rank_plan;
#[path = "rank_program.rs"]
mod rank_program;

/// A communication plan: transfers of segments between rank buffers.
#[pyclass(module = "collsched._core", name = "Plan", frozen)]
pub struct PyPlan {
    pub inner: Plan,
    /// `Plan::hash`, kept once computed (the plan cannot change): the runtime, the plan cache
    /// and `repr` all ask for it.
    hash: OnceLock<u64>,
}

impl PyPlan {
    pub fn new(inner: Plan) -> PyPlan {
        PyPlan { inner, hash: OnceLock::new() }
    }
    /// The content hash, computed without the GIL on first use. Not `get_or_init`: a second
    /// thread waiting in it while holding the GIL would keep the first from taking it back.
    fn content_hash(&self, py: Python<'_>) -> u64 {
        if let Some(&h) = self.hash.get() {
            return h;
        }
        let h = py.allow_threads(|| self.inner.hash());
        let _ = self.hash.set(h);
        h
    }
}

impl Drop for PyPlan {
    /// Python dropped the plan: its arrays serve the next one (planning in a loop then
    /// writes into mapped memory instead of faulting in fresh pages).
    fn drop(&mut self) {
        let p = &mut self.inner;
        collsched_core::plan::recycle_arrays(std::mem::take(&mut p.transfers), std::mem::take(&mut p.segments), std::mem::take(&mut p.deps));
    }
}

#[pymethods]
impl PyPlan {
    /// Content hash as 16 hex digits; ranks compare it before moving data.
    #[getter]
    fn hash(&self, py: Python<'_>) -> String {
        format!("{:016x}", self.content_hash(py))
    }
    /// Hash of the plan's inputs (matrix, cluster, algorithm, options).
    #[getter]
    fn input_hash(&self) -> String {
        format!("{:016x}", self.inner.input_hash)
    }
    #[getter]
    fn algorithm(&self) -> String {
        self.inner.algorithm.clone()
    }
    #[getter]
    fn collective(&self) -> &'static str {
        self.inner.collective.name()
    }
    #[getter]
    fn num_ranks(&self) -> u32 {
        self.inner.num_ranks()
    }
    #[getter]
    fn gpus_per_server(&self) -> u32 {
        self.inner.gpus_per_server
    }
    #[getter]
    fn num_transfers(&self) -> usize {
        self.inner.transfers.len()
    }
    #[getter]
    fn num_segments(&self) -> usize {
        self.inner.segments.len()
    }
    #[getter]
    fn num_deps(&self) -> usize {
        self.inner.deps.len()
    }
    /// Bytes the plan's transfer, segment and dependency arrays take in memory.
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.array_bytes()
    }
    #[getter]
    fn num_steps(&self) -> u32 {
        self.inner.num_steps()
    }
    #[getter]
    fn scratch_bytes(&self) -> Vec<u64> {
        self.inner.scratch_bytes.clone()
    }
    #[getter]
    fn input_sizes(&self) -> Vec<u64> {
        self.inner.collective.input_sizes()
    }
    #[getter]
    fn output_sizes(&self) -> Vec<u64> {
        self.inner.collective.output_sizes()
    }
    /// Producer facts: stage count, choice and reason, predicted time...
    #[getter]
    fn meta(&self) -> BTreeMap<String, String> {
        self.inner.meta.clone()
    }
    /// Bytes moved per tier: {"local": .., "scale_up": .., "scale_out": ..}.
    fn bytes_per_tier(&self) -> BTreeMap<&'static str, u128> {
        let b = self.inner.bytes_per_tier();
        BTreeMap::from([("local", b[0]), ("scale_up", b[1]), ("scale_out", b[2])])
    }
    /// Symbolically execute the plan; raise VerificationError naming the first violating transfer.
    /// `final_state="caller"`: every check but the final state, which the caller proves itself;
    /// reduce_sum is then allowed in any plan, in whole `elem_bytes` elements.
    #[pyo3(signature = (final_state="collective", elem_bytes=1))]
    fn verify<'py>(&self, py: Python<'py>, final_state: &str, elem_bytes: u64) -> PyResult<Bound<'py, PyDict>> {
        use collsched_core::plan::verify::{verify_with, FinalState};
        let mode = match final_state {
            "collective" => FinalState::Collective,
            "caller" if elem_bytes > 0 => FinalState::Caller { elem_bytes },
            "caller" => return Err(PyValueError::new_err(format!("elem_bytes must be positive, got {elem_bytes}"))),
            other => return Err(PyValueError::new_err(format!("final_state must be 'collective' or 'caller', got {other:?}"))),
        };
        let r = py.allow_threads(|| guarded(|| verify_with(&self.inner, mode)))?;
        let d = PyDict::new(py);
        d.set_item("transfers", r.transfers)?;
        d.set_item("segments", r.segments)?;
        d.set_item("bytes_moved", r.bytes_moved)?;
        d.set_item("final_state", if mode == FinalState::Collective { "checked" } else { "left to the caller" })?;
        Ok(d)
    }
    fn to_json(&self) -> String {
        self.inner.to_json()
    }
    #[staticmethod]
    fn from_json(s: &str) -> PyResult<PyPlan> {
        Ok(PyPlan::new(guarded(|| Plan::from_json(s))?))
    }
    fn to_binary<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.allow_threads(|| self.inner.to_binary());
        PyBytes::new(py, &bytes)
    }
    #[staticmethod]
    fn from_binary(b: &[u8]) -> PyResult<PyPlan> {
        Ok(PyPlan::new(guarded(|| Plan::from_binary(b))?))
    }
    /// Raw little-endian columns for the executor: `collsched.plan.plan_arrays` turns them into numpy.
    /// transfers: (src u32, dst u32, op u32, tier u32, step u32, seg_begin u32, seg_end u32, dep_begin u32, dep_end u32) per row;
    /// segments: (src_buf u64, src_off u64, dst_buf u64, dst_off u64, len u64) per row; deps: u32.
    fn _raw_arrays<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = &self.inner;
        let d = PyDict::new(py);
        d.set_item("transfers", PyBytes::new(py, &transfer_rows(&p.transfers)))?;
        d.set_item("segments", PyBytes::new(py, &segment_rows(&p.segments)))?;
        d.set_item("deps", PyBytes::new(py, &u32_rows(&p.deps)))?;
        Ok(d)
    }
    /// `rank`'s part of this plan, the `RankPlan` that `plan_for_rank` expands on its own;
    /// with `moving_pairs`, also the per-step moving pairs (`plan_for_rank(..., moving_pairs=True)`).
    #[pyo3(signature = (rank, moving_pairs=false))]
    fn rank_plan(&self, py: Python<'_>, rank: u32, moving_pairs: bool) -> PyResult<rank_plan::PyRankPlan> {
        let inner = py.allow_threads(|| guarded(|| self.inner.rank_plan_with(rank, moving_pairs)))?;
        Ok(rank_plan::PyRankPlan { inner })
    }
    /// Digest of the producer's decisions and the inputs, as 16 hex digits (what the
    /// `RankPlan`s cut from this plan carry).
    #[getter]
    fn digest(&self) -> String {
        format!("{:016x}", self.inner.digest())
    }
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Plan({} {} on {} ranks: {} transfers, {} segments, {} steps, hash {:016x})",
            self.inner.algorithm,
            self.inner.collective.name(),
            self.inner.num_ranks(),
            self.inner.transfers.len(),
            self.inner.segments.len(),
            self.inner.num_steps(),
            self.content_hash(py)
        )
    }
}

/// Transfers as little-endian rows of nine u32 (the runtime's TRANSFER_DTYPE).
fn transfer_rows(transfers: &[collsched_core::plan::Transfer]) -> Vec<u8> {
    let mut t = Vec::with_capacity(transfers.len() * 36);
    for x in transfers {
        for v in [x.src, x.dst, x.op as u32, x.tier as u32, x.step, x.seg_begin, x.seg_end, x.dep_begin, x.dep_end] {
            t.extend_from_slice(&v.to_le_bytes());
        }
    }
    t
}

/// Segments as little-endian rows of five u64 (the runtime's SEGMENT_DTYPE).
fn segment_rows(segments: &[collsched_core::plan::Segment]) -> Vec<u8> {
    let mut s = Vec::with_capacity(segments.len() * 40);
    for x in segments {
        for v in [x.src_buf as u64, x.src_off, x.dst_buf as u64, x.dst_off, x.len] {
            s.extend_from_slice(&v.to_le_bytes());
        }
    }
    s
}

fn u32_rows(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|d| d.to_le_bytes()).collect()
}

/// Plan an all-to-all(v). `data` is the row-major little-endian u64 matrix.
#[pyfunction]
#[pyo3(signature = (n, data, cluster, algorithm, options=None))]
fn plan_all_to_all(py: Python<'_>, n: usize, data: &[u8], cluster: &PyCluster, algorithm: &str, options: Option<BTreeMap<String, String>>) -> PyResult<PyPlan> {
    let opts: Options = options.unwrap_or_default();
    let c = &cluster.inner;
    // `data` borrows the (immutable) bytes object: one copy, straight into the Traffic.
    let plan = py.allow_threads(|| {
        guarded(|| {
            let t = Traffic::from_le_bytes(n, data)?;
            collsched_core::algo::plan_all_to_all(&t, c, algorithm, &opts)
        })
    })?;
    Ok(PyPlan::new(plan))
}

/// Benchmark helper: nanoseconds the core takes to plan (buffer → Traffic → Plan, the
/// plan dropped (recycled, as a Python Plan is) outside the timed part), without the Python call and wrapping around it.
#[pyfunction]
#[pyo3(signature = (n, data, cluster, algorithm, options=None))]
fn _core_plan_ns(py: Python<'_>, n: usize, data: &[u8], cluster: &PyCluster, algorithm: &str, options: Option<BTreeMap<String, String>>) -> PyResult<u64> {
    let opts: Options = options.unwrap_or_default();
    let c = &cluster.inner;
    py.allow_threads(|| {
        guarded(|| {
            let t0 = std::time::Instant::now();
            let t = Traffic::from_le_bytes(n, data)?;
            let plan = collsched_core::algo::plan_all_to_all(&t, c, algorithm, &opts)?;
            let ns = t0.elapsed().as_nanos() as u64;
            collsched_core::plan::recycle(plan); // what dropping a Python Plan does
            Ok(ns)
        })
    })
}

/// Median nanoseconds to fill `nbytes` of mapped memory on this thread
/// (`plan::floor`): what writing a plan that size costs at least. For benchmarks.
#[pyfunction]
fn _write_floor_ns(py: Python<'_>, nbytes: usize, reps: usize) -> PyResult<u64> {
    // Plans this large are not recycled either (`plan::RECYCLE_LIMIT_BYTES` is 128 MiB), and
    // a failed allocation would abort the process rather than raise.
    if nbytes > 1 << 30 {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("nbytes {nbytes} is over the 1 GiB this measurement allocates at most")));
    }
    Ok(py.allow_threads(|| collsched_core::plan::floor::write_floor(nbytes, reps).as_nanos() as u64))
}

/// `[(name, description)]` of the all-to-all algorithms.
#[pyfunction]
fn all_to_all_algorithms() -> Vec<(String, String)> {
    collsched_core::algo::ALL_TO_ALL_ALGORITHMS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPlan>()?;
    m.add_function(wrap_pyfunction!(plan_all_to_all, m)?)?;
    m.add_function(wrap_pyfunction!(all_to_all_algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(_core_plan_ns, m)?)?;
    m.add_function(wrap_pyfunction!(_write_floor_ns, m)?)?;
    rank_plan::register(m)?;
    rank_program::register(m)?;
    Ok(())
}
