use crate::guarded;
use collsched_core::traffic::generators as gen;
use numpy::{PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The numpy matrix passed as `param`, borrowed read-only: a 2-D uint64 array, else a
/// ValueError naming `param` and what it got (`collsched.traffic.wire_matrix` converts
/// anything else before calling the core).
pub(crate) fn readonly_matrix<'py>(obj: &Bound<'py, PyAny>, param: &str) -> PyResult<PyReadonlyArray2<'py, u64>> {
    match obj.downcast::<PyArray2<u64>>() {
        Ok(a) => a.try_readonly().map_err(|e| PyValueError::new_err(format!("{param}: traffic matrix cannot be read ({e})"))),
        Err(_) => {
            let what = match (obj.getattr("dtype"), obj.getattr("shape")) {
                (Ok(d), Ok(s)) => format!("dtype {d}, shape {s}"),
                _ => format!("type {}", obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())),
            };
            Err(PyValueError::new_err(format!("{param}: traffic matrix must be a 2-D numpy array of dtype uint64, got {what}")))
        }
    }
}

/// The entries of a square C-contiguous matrix, in place (P and the row-major entries),
/// else a ValueError naming `param`.
pub(crate) fn square<'a>(matrix: &'a PyReadonlyArray2<'_, u64>, param: &str) -> PyResult<(usize, &'a [u64])> {
    let shape = matrix.shape();
    if shape[0] != shape[1] || shape[0] == 0 {
        return Err(PyValueError::new_err(format!("{param}: traffic matrix must be square P×P with P ≥ 1, got shape ({}, {})", shape[0], shape[1])));
    }
    // `as_slice` also takes Fortran order, which would read the matrix transposed.
    match matrix.as_slice() {
        Ok(data) if matrix.is_c_contiguous() => Ok((shape[0], data)),
        _ => Err(PyValueError::new_err(format!("{param}: traffic matrix must be C-contiguous (np.ascontiguousarray)"))),
    }
}

fn out<'py>(py: Python<'py>, t: collsched_core::Traffic) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &t.to_le_bytes())
}

/// Generators return little-endian u64 bytes; `collsched.traffic` wraps them in numpy.
#[pyfunction]
fn gen_balanced<'py>(py: Python<'py>, n: usize, bytes: u64) -> PyResult<Bound<'py, PyBytes>> {
    Ok(out(py, guarded(|| gen::balanced(n, bytes))?))
}
#[pyfunction]
fn gen_uniform<'py>(py: Python<'py>, n: usize, mean: u64, seed: u64) -> PyResult<Bound<'py, PyBytes>> {
    Ok(out(py, guarded(|| gen::uniform(n, mean, seed))?))
}
#[pyfunction]
fn gen_zipf<'py>(py: Python<'py>, n: usize, s: f64, mean: u64, seed: u64) -> PyResult<Bound<'py, PyBytes>> {
    Ok(out(py, guarded(|| gen::zipf(n, s, mean, seed))?))
}
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn gen_hot_experts<'py>(py: Python<'py>, n: usize, tokens_per_rank: u64, top_k: u32, experts: u32, skew: f64, hidden: u64, dtype_bytes: u64, seed: u64) -> PyResult<Bound<'py, PyBytes>> {
    let r = gen::MoeRouting { tokens_per_rank, top_k, experts, skew, hidden, dtype_bytes };
    Ok(out(py, guarded(|| gen::hot_experts(n, &r, seed))?))
}
/// Validate a matrix (sizes, u64 overflow of sums) and return its content hash.
#[pyfunction]
fn traffic_hash(n: usize, data: &[u8]) -> PyResult<u64> {
    guarded(|| Ok(collsched_core::Traffic::from_le_bytes(n, data)?.hash()))
}

/// Content hash of a byte string (e.g. a matrix's bytes), the word-wise hash of
/// `collsched_core::plan::hash`: ~10× blake2b's speed, for cache keys that are confirmed by
/// comparing the matrices themselves. (Bytes, not any buffer: the buffer protocol is not in
/// the stable ABI before Python 3.11.)
#[pyfunction]
fn bytes_hash(data: &[u8]) -> u64 {
    let mut h = collsched_core::plan::hash::Fnv64::new();
    h.write(data);
    h.finish()
}

/// Round every entry up to a multiple of `align` bytes (`Traffic::aligned`).
#[pyfunction]
fn traffic_aligned<'py>(py: Python<'py>, n: usize, data: &[u8], align: u64) -> PyResult<Bound<'py, PyBytes>> {
    Ok(out(py, guarded(|| collsched_core::Traffic::from_le_bytes(n, data)?.aligned(align))?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(gen_balanced, m)?)?;
    m.add_function(wrap_pyfunction!(gen_uniform, m)?)?;
    m.add_function(wrap_pyfunction!(gen_zipf, m)?)?;
    m.add_function(wrap_pyfunction!(gen_hot_experts, m)?)?;
    m.add_function(wrap_pyfunction!(traffic_hash, m)?)?;
    m.add_function(wrap_pyfunction!(bytes_hash, m)?)?;
    m.add_function(wrap_pyfunction!(traffic_aligned, m)?)?;
    Ok(())
}
