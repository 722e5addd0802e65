//! Bindings for ForestColl: graphs, exact optimum, schedules, plans.
use crate::cluster::PyCluster;
use crate::guarded;
use crate::plan::PyPlan;
use collsched_core::forest::{self, ForestSchedule, KChoice, Optimum};
use collsched_core::topology::graph::{Graph, NodeKind, GRAPH_PRESETS};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A capacitated directed graph of compute and switch nodes (bytes/s).
#[pyclass(module = "collsched._core", name = "Graph", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyGraph {
    pub inner: Graph,
}

#[pymethods]
impl PyGraph {
    /// `a100:N`, `mi250:N`, `h100:N` (paper testbeds) or any cluster spec (`h200:4,nic=100Gbps`).
    #[staticmethod]
    fn parse(spec: &str) -> PyResult<PyGraph> {
        Ok(PyGraph { inner: guarded(|| Graph::parse_preset(spec))? })
    }
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<PyGraph> {
        Ok(PyGraph { inner: guarded(|| Graph::from_json(text))? })
    }
    #[staticmethod]
    fn from_cluster(cluster: &PyCluster) -> PyResult<PyGraph> {
        Ok(PyGraph { inner: guarded(|| Graph::from_cluster(&cluster.inner))? })
    }
    /// `[(name, description)]` of the paper testbed presets.
    #[staticmethod]
    fn presets() -> Vec<(String, String)> {
        GRAPH_PRESETS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }
    fn to_json(&self) -> String {
        self.inner.to_json()
    }
    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }
    #[getter]
    fn num_nodes(&self) -> usize {
        self.inner.num_nodes()
    }
    #[getter]
    fn num_compute(&self) -> usize {
        self.inner.num_compute()
    }
    /// Names of the compute nodes in rank order.
    #[getter]
    fn compute_nodes(&self) -> Vec<String> {
        self.inner.compute_nodes().iter().map(|&v| self.inner.name(v).to_string()).collect()
    }
    /// `[{"name", "kind", "box", "multicast"}]`.
    #[getter]
    fn nodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let l = PyList::empty(py);
        for n in &self.inner.nodes {
            let d = PyDict::new(py);
            d.set_item("name", &n.name)?;
            d.set_item("kind", if n.kind == NodeKind::Compute { "compute" } else { "switch" })?;
            d.set_item("box", n.box_id)?;
            d.set_item("multicast", n.multicast)?;
            l.append(d)?;
        }
        Ok(l)
    }
    /// `[(src name, dst name, bytes/s)]`.
    #[getter]
    fn links(&self) -> Vec<(String, String, u64)> {
        self.inner.links.iter().map(|l| (self.inner.name(l.src).to_string(), self.inner.name(l.dst).to_string(), l.bw)).collect()
    }
    /// GPUs per box when ranks are box-major with equal counts, else 0.
    #[getter]
    fn gpus_per_box(&self) -> u32 {
        self.inner.gpus_per_box()
    }
    fn __repr__(&self) -> String {
        format!("Graph('{}', {} nodes, {} compute, {} links)", self.inner.name, self.inner.num_nodes(), self.inner.num_compute(), self.inner.links.len())
    }
}

fn optimum_dict<'py>(py: Python<'py>, g: &Graph, o: &Optimum) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("algbw_exact", o.algbw.to_string())?;
    d.set_item("algbw_gbps", o.algbw.to_f64() / 1e9)?;
    d.set_item("x_exact", o.x.to_string())?;
    d.set_item("k", o.k)?;
    d.set_item("tree_bandwidth", o.tree_bw.to_f64())?;
    d.set_item("tree_bandwidth_exact", o.tree_bw.to_string())?;
    d.set_item("bottleneck_cut", o.bottleneck.iter().map(|&v| g.name(v).to_string()).collect::<Vec<_>>())?;
    Ok(d)
}

/// `optimal(graph) -> dict`: exact allgather optimum.
#[pyfunction]
fn forest_optimal<'py>(py: Python<'py>, graph: &PyGraph) -> PyResult<Bound<'py, PyDict>> {
    let o = py.allow_threads(|| guarded(|| forest::optimal(&graph.inner)))?;
    optimum_dict(py, &graph.inner, &o)
}

/// A ForestColl schedule: spanning out-trees with multiplicities and physical routes.
#[pyclass(module = "collsched._core", name = "ForestSchedule", frozen)]
pub struct PySchedule {
    pub inner: ForestSchedule,
}

#[pymethods]
impl PySchedule {
    #[getter]
    fn k(&self) -> u64 {
        self.inner.k
    }
    #[getter]
    fn num_ranks(&self) -> u32 {
        self.inner.num_ranks()
    }
    #[getter]
    fn generation_s(&self) -> f64 {
        self.inner.generation_s
    }
    #[getter]
    fn algbw_exact(&self) -> String {
        self.inner.algbw.to_string()
    }
    #[getter]
    fn algbw_gbps(&self) -> f64 {
        self.inner.algbw.to_f64() / 1e9
    }
    /// Bytes/s of one tree (a tree of multiplicity m gets m times this).
    #[getter]
    fn tree_bandwidth(&self) -> f64 {
        self.inner.tree_bw.to_f64()
    }
    #[getter]
    fn max_depth(&self) -> u32 {
        self.inner.max_depth()
    }
    #[getter]
    fn graph(&self) -> PyGraph {
        PyGraph { inner: self.inner.graph.clone() }
    }
    /// The exact optimum of the graph (what `optimal(graph)` returns).
    #[getter]
    fn optimal<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        optimum_dict(py, &self.inner.graph, &self.inner.optimum)
    }
    /// `[{"root": rank, "multiplicity": m, "edges": [(src rank, dst rank, [route node names])]}]`.
    #[getter]
    fn trees<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let g = &self.inner.graph;
        let l = PyList::empty(py);
        for t in &self.inner.trees {
            let d = PyDict::new(py);
            d.set_item("root", t.root)?;
            d.set_item("multiplicity", t.multiplicity)?;
            let edges: Vec<(u32, u32, Vec<String>)> = t.edges.iter().map(|e| (e.src, e.dst, e.path.iter().map(|&v| g.name(v).to_string()).collect())).collect();
            d.set_item("edges", edges)?;
            l.append(d)?;
        }
        Ok(l)
    }
    /// `{(src, dst): bytes/s}` carried by each physical link (multicast switches deduplicated).
    fn link_loads<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = &self.inner.graph;
        let d = PyDict::new(py);
        for ((a, b), load) in self.inner.link_loads() {
            d.set_item((g.name(a), g.name(b)), load.to_f64())?;
        }
        Ok(d)
    }
    /// Timing and counters of the generation stages.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner.stats;
        let d = PyDict::new(py);
        d.set_item("optimal_s", s.optimal_s)?;
        d.set_item("fixed_k_s", s.fixed_k_s)?;
        d.set_item("removal_s", s.removal_s)?;
        d.set_item("packing_s", s.packing_s)?;
        d.set_item("splits", s.splits)?;
        d.set_item("gammas", s.gammas)?;
        d.set_item("split_flows", s.split_flows)?;
        d.set_item("mu_flows", s.mu_flows)?;
        d.set_item("batch_splits", s.batch_splits)?;
        d.set_item("trees", self.inner.trees.len())?;
        Ok(d)
    }
    /// Raise ValueError unless every tree spans all ranks, each root has k trees and no
    /// link is over capacity.
    fn check(&self) -> PyResult<()> {
        guarded(|| self.inner.check())
    }
    /// Predicted allgather time (s) for `bytes` of output per rank with `chunks` pipeline chunks.
    #[pyo3(signature = (bytes, chunks = forest::plan::DEFAULT_CHUNKS))]
    fn predicted_time(&self, bytes: u64, chunks: u32) -> f64 {
        forest::predicted_time_chunks(&self.inner, bytes, chunks)
    }
    /// Pipeline chunks per tree for `output_bytes` per rank when each piece pays
    /// `latency_ns` (default: 6 µs across boxes, 3 µs inside one): ⌊√(T / latency)⌋ in 1..=64.
    #[pyo3(signature = (output_bytes, latency_ns = None))]
    fn auto_chunks(&self, output_bytes: u64, latency_ns: Option<u64>) -> u32 {
        let latency = latency_ns.unwrap_or_else(|| forest::default_piece_latency_ns(&self.inner));
        forest::auto_chunks(&self.inner, output_bytes, latency)
    }
    fn __repr__(&self) -> String {
        format!(
            "ForestSchedule(graph='{}', k={}, trees={}, algbw={:.2} GB/s, optimal={:.2} GB/s)",
            self.inner.graph.name,
            self.inner.k,
            self.inner.trees.len(),
            self.inner.algbw.to_f64() / 1e9,
            self.inner.optimum.algbw.to_f64() / 1e9
        )
    }
}

/// `k=None`: automatic (optimal k if < 10, else the best k in 1..9); `optimal=True`: the
/// optimal k however large; else exactly `k` trees per root. `spread_fan`: see
/// `ForestOptions` (None: 8 up to 256 compute nodes, else 1). `interleave`: grow trees in
/// turns (shallower; None: up to 64 compute nodes).
#[pyfunction]
#[pyo3(signature = (graph, k = None, optimal = false, spread_fan = None, interleave = None))]
fn forest_schedule(py: Python<'_>, graph: &PyGraph, k: Option<u64>, optimal: bool, spread_fan: Option<u64>, interleave: Option<bool>) -> PyResult<PySchedule> {
    let choice = match (k, optimal) {
        (Some(_), true) => return Err(pyo3::exceptions::PyValueError::new_err("give either k or optimal=True, not both")),
        (Some(k), false) => KChoice::Fixed(k),
        (None, true) => KChoice::Optimal,
        (None, false) => KChoice::Auto,
    };
    let g = graph.inner.clone();
    let mut opts = forest::ForestOptions::for_graph(&g);
    if let Some(f) = spread_fan {
        if f == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err("spread_fan must be at least 1"));
        }
        opts.spread_fan = f;
    }
    if let Some(i) = interleave {
        opts.growth = if i { forest::Growth::Interleaved } else { forest::Growth::Sequential };
    }
    let s = py.allow_threads(move || guarded(|| forest::schedule_with(&g, choice, &opts)))?;
    Ok(PySchedule { inner: s })
}

#[pyfunction]
#[pyo3(signature = (schedule, shard_bytes, chunks = 8, merge = true, split_multiplicity = false))]
fn forest_plan_allgather(py: Python<'_>, schedule: &PySchedule, shard_bytes: u64, chunks: u32, merge: bool, split_multiplicity: bool) -> PyResult<PyPlan> {
    let p = py.allow_threads(|| guarded(|| forest::plan_allgather_with(&schedule.inner, shard_bytes, &forest::PlanOptions { chunks, merge, split_multiplicity })))?;
    Ok(PyPlan::new(p))
}

#[pyfunction]
#[pyo3(signature = (schedule, shard_bytes, elem_bytes = 4, chunks = 8, merge = true, split_multiplicity = false))]
fn forest_plan_reduce_scatter(py: Python<'_>, schedule: &PySchedule, shard_bytes: u64, elem_bytes: u32, chunks: u32, merge: bool, split_multiplicity: bool) -> PyResult<PyPlan> {
    let p = py.allow_threads(|| guarded(|| forest::plan_reduce_scatter_with(&schedule.inner, shard_bytes, elem_bytes, &forest::PlanOptions { chunks, merge, split_multiplicity })))?;
    Ok(PyPlan::new(p))
}

#[pyfunction]
#[pyo3(signature = (schedule, bytes, elem_bytes = 4, chunks = 8, merge = true, split_multiplicity = false))]
fn forest_plan_allreduce(py: Python<'_>, schedule: &PySchedule, bytes: u64, elem_bytes: u32, chunks: u32, merge: bool, split_multiplicity: bool) -> PyResult<PyPlan> {
    let p = py.allow_threads(|| guarded(|| forest::plan_allreduce_with(&schedule.inner, bytes, elem_bytes, &forest::PlanOptions { chunks, merge, split_multiplicity })))?;
    Ok(PyPlan::new(p))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGraph>()?;
    m.add_class::<PySchedule>()?;
    m.add_function(wrap_pyfunction!(forest_optimal, m)?)?;
    m.add_function(wrap_pyfunction!(forest_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(forest_plan_allgather, m)?)?;
    m.add_function(wrap_pyfunction!(forest_plan_reduce_scatter, m)?)?;
    m.add_function(wrap_pyfunction!(forest_plan_allreduce, m)?)?;
    Ok(())
}
