use crate::guarded;
use collsched_core::topology::cluster::SPEC_KEYS;
use collsched_core::topology::presets::PRESETS;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A two-tier GPU cluster. Build one with `Cluster.parse("h200:4")`.
#[pyclass(module = "collsched._core", name = "Cluster", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyCluster {
    pub inner: collsched_core::Cluster,
}

#[pymethods]
impl PyCluster {
    /// Parse `NAME:SERVERS[,key=value...]`, e.g. `h200:4` or `mi300x:3,nic=100Gbps`.
    #[staticmethod]
    fn parse(spec: &str) -> PyResult<PyCluster> {
        Ok(PyCluster { inner: guarded(|| collsched_core::Cluster::parse(spec))? })
    }
    /// `[(name, description)]` of the presets.
    #[staticmethod]
    fn presets() -> Vec<(String, String)> {
        PRESETS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }
    /// `[(key, description)]` of the spec overrides.
    #[staticmethod]
    fn spec_keys() -> Vec<(String, String)> {
        SPEC_KEYS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }
    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }
    #[getter]
    fn servers(&self) -> u32 {
        self.inner.servers
    }
    #[getter]
    fn gpus_per_server(&self) -> u32 {
        self.inner.gpus_per_server
    }
    #[getter]
    fn num_gpus(&self) -> u32 {
        self.inner.num_gpus()
    }
    #[getter]
    fn nics_per_server(&self) -> u32 {
        self.inner.nics_per_server
    }
    /// Bytes/s per NIC per direction.
    #[getter]
    fn nic_bw(&self) -> u64 {
        self.inner.nic_bw
    }
    #[getter]
    fn fabric(&self) -> &'static str {
        self.inner.fabric_name()
    }
    /// Total scale-up bytes/s out of one GPU.
    #[getter]
    fn gpu_scaleup_bw(&self) -> u64 {
        self.inner.gpu_scaleup_bw()
    }
    fn server_of(&self, rank: u32) -> u32 {
        self.inner.server_of(rank)
    }
    fn nic_of(&self, rank: u32) -> u32 {
        self.inner.nic_of(rank)
    }
    /// A spec string that parses back to this cluster.
    fn spec(&self) -> String {
        self.inner.spec()
    }
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let c = &self.inner;
        d.set_item("name", &c.name)?;
        d.set_item("servers", c.servers)?;
        d.set_item("gpus_per_server", c.gpus_per_server)?;
        d.set_item("fabric", c.fabric_name())?;
        d.set_item("gpu_scaleup_bw", c.gpu_scaleup_bw())?;
        d.set_item("nics_per_server", c.nics_per_server)?;
        d.set_item("nic_bw", c.nic_bw)?;
        d.set_item("alpha_local_ns", c.alpha_local_ns)?;
        d.set_item("alpha_scaleup_ns", c.alpha_scaleup_ns)?;
        d.set_item("alpha_scaleout_ns", c.alpha_scaleout_ns)?;
        d.set_item("local_copy_bw", c.local_copy_bw)?;
        // The hardware model's terms, as spec key → value (neutral ones omitted), and where
        // the preset's fitted constants come from (None without any).
        let hw = PyDict::new(py);
        for (k, v) in c.hw.spec_pairs() {
            hw.set_item(k, v)?;
        }
        d.set_item("hardware", hw)?;
        let fitted = collsched_core::topology::hardware::fitted_for(&c.name);
        d.set_item("hardware_source", fitted.map(|f| format!("{} ({})", f.source, f.date)))?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        let c = &self.inner;
        format!(
            "Cluster('{}': {} servers × {} GPUs, {} {:.0} GB/s per GPU, {} NICs × {:.0} Gb/s)",
            c.name,
            c.servers,
            c.gpus_per_server,
            c.fabric_name(),
            c.gpu_scaleup_bw() as f64 / 1e9,
            c.nics_per_server,
            c.nic_bw as f64 * 8.0 / 1e9
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCluster>()
}
