//! One rank's executable program (`plan::rank_program`), handed to Python in the form the
//! executors read: one plain tuple per message in `Message`'s field order, one per action
//! in `Action`'s, flat lists and ranges for the rest, so python/collsched/comm/program.py
//! only maps them onto its named tuples and cuts the steps. Declared from `plan.rs`.
use super::rank_plan::PyRankPlan;
use super::PyPlan;
use crate::guarded;
use collsched_core::plan::rank_plan::RankPlan;
use collsched_core::plan::rank_program::{self, Kind, RankProgram};
use collsched_core::plan::Segment;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// A compiled rank program; `collsched.comm.program.RankProgram` keeps it for `overlap`.
#[pyclass(module = "collsched._core", name = "RankProgram", frozen)]
pub struct PyRankProgram {
    inner: RankProgram,
}

/// Per action, its place in the step-ordered `order` (`comm_order` or `local_order`).
fn positions(n: usize, order: &[u32]) -> Vec<usize> {
    let mut at = vec![usize::MAX; n];
    for (k, &i) in order.iter().enumerate() {
        at[i as usize] = k;
    }
    at
}

impl PyRankProgram {
    /// `(messages, is_send, copies, local_rows, steps, totals)`: messages (sends and
    /// receives) as `(tag, peer, op, nbytes, [(buf, off, len, msg_off)], stage_off)` and local
    /// copies as `(op, [(src_buf, src_off, dst_buf, dst_off, len)])`, each list ordered by
    /// step (id order within one); steps as `(step, comm_begin, comm_end, send_begin,
    /// send_end, recv_begin, recv_end, local_begin, local_end, staging_bytes, global_comm,
    /// dense)`; totals `(input, output, scratch, staging, sent, received, uses_reduce)`.
    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let p = &self.inner;
        let mut msgs = Vec::with_capacity(p.comm_order.len());
        for &i in &p.comm_order {
            let a = &p.actions[i as usize];
            let send = a.kind == Kind::Send;
            let side = |s: &Segment| if send { (s.src_buf as u8, s.src_off) } else { (s.dst_buf as u8, s.dst_off) };
            let nbytes = a.nbytes.into_pyobject(py)?;
            let segs = &p.segments[a.seg_range()];
            // Most messages have one segment: its length is the message's (one int object for both).
            let seg_list = if let [s] = segs {
                let (b, off) = side(s);
                PyList::new(py, [(b, off, nbytes.clone(), 0u64)])?
            } else {
                let mut at = 0u64;
                PyList::new(
                    py,
                    segs.iter().map(|s| {
                        let (b, off) = side(s);
                        at += s.len;
                        (b, off, s.len, at - s.len)
                    }),
                )?
            };
            msgs.push((a.tag, a.peer, a.op as u8, nbytes, seg_list, a.step_stage).into_pyobject(py)?);
        }
        let msgs = PyList::new(py, msgs)?;
        let is_send = PyList::new(py, p.comm_order.iter().map(|&i| p.actions[i as usize].kind == Kind::Send))?;
        let copies = PyList::new(
            py,
            p.local_order.iter().map(|&i| {
                let a = &p.actions[i as usize];
                let rows: Vec<(u8, u64, u8, u64, u64)> = p.segments[a.seg_range()].iter().map(|s| (s.src_buf as u8, s.src_off, s.dst_buf as u8, s.dst_off, s.len)).collect();
                (a.op as u8, rows)
            }),
        )?;
        let local_rows = PyList::new(py, p.local_order.iter().map(|&i| p.actions[i as usize].row))?;
        let steps = PyList::new(
            py,
            p.steps.iter().map(|s| (s.step, s.comm.0, s.comm.1, s.sends.0, s.sends.1, s.recvs.0, s.recvs.1, s.locals.0, s.locals.1, s.staging_bytes, s.global_comm, s.dense)),
        )?;
        let totals = (p.input_bytes, p.output_bytes, p.scratch_bytes, p.staging_bytes, p.bytes_sent, p.bytes_received, p.uses_reduce);
        (msgs, is_send, copies, local_rows, steps, totals).into_pyobject(py)
    }
}

#[pymethods]
impl PyRankProgram {
    /// The dependency-driven executor's program, given the objects `_layout`'s lists became
    /// (`msgs`, `copies`: same order): `(actions, dependents, staging_bytes, early_recvs,
    /// post_waiters)`, actions in row order as `(kind, row, msg, local, deps, stage_off,
    /// post_after)` (`msg` None for a local copy, `local` None for a message).
    fn _overlap<'py>(&self, py: Python<'py>, msgs: &Bound<'py, PyList>, copies: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyTuple>> {
        let p = &self.inner;
        if msgs.len() != p.comm_order.len() || copies.len() != p.local_order.len() {
            return Err(PyValueError::new_err(format!("expected {} messages and {} local copies, got {} and {}", p.comm_order.len(), p.local_order.len(), msgs.len(), copies.len())));
        }
        let ov = py.allow_threads(|| guarded(|| Ok(rank_program::overlap(p))))?;
        let n = p.actions.len();
        let (msg_at, copy_at) = (positions(n, &p.comm_order), positions(n, &p.local_order));
        let mut actions = Vec::with_capacity(n);
        for (i, a) in p.actions.iter().enumerate() {
            let (msg, local) = if a.kind == Kind::Local { (None, Some(copies.get_item(copy_at[i])?)) } else { (Some(msgs.get_item(msg_at[i])?), None) };
            let deps = PyTuple::new(py, ov.waits_for.row(i))?;
            let post_after = PyTuple::new(py, ov.post_after.row(i))?;
            actions.push((a.kind as u8, a.row, msg, local, deps, ov.stage[i], post_after).into_pyobject(py)?);
        }
        let rows = |r: &rank_program::Rows| -> PyResult<Bound<'py, PyList>> {
            let tuples = (0..n).map(|i| PyTuple::new(py, r.row(i))).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, tuples)
        };
        (PyList::new(py, actions)?, rows(&ov.dependents)?, ov.staging_bytes, ov.early_recvs.clone(), rows(&ov.post_waiters)?).into_pyobject(py)
    }

    /// The plan's deps between this rank's transfers that move bytes: sorted
    /// `[(row, row it waits for)]` of the rank plan.
    fn _dep_rows(&self) -> Vec<(u32, u32)> {
        self.inner.dep_rows()
    }
}

/// Compile `rank`'s program from `source`, a whole `Plan` (cut through `Plan::rank_plan_with`)
/// or that rank's `RankPlan`: `(RankProgram, layout)` (see `PyRankProgram::layout`).
/// `collective_steps`: also list the steps every rank joins.
#[pyfunction]
fn _compile_rank_program<'py>(py: Python<'py>, source: &Bound<'py, PyAny>, rank: u32, collective_steps: bool) -> PyResult<(PyRankProgram, Bound<'py, PyTuple>)> {
    let inner = if let Ok(plan) = source.downcast::<PyPlan>() {
        let plan = &plan.get().inner;
        py.allow_threads(|| guarded(|| rank_program::compile(&plan.rank_plan_with(rank, collective_steps)?, collective_steps)))?
    } else if let Ok(rp) = source.downcast::<PyRankPlan>() {
        let rp = &rp.get().inner;
        if rp.rank != rank {
            return Err(PyValueError::new_err(format!("this RankPlan is rank {}'s, not rank {rank}'s", rp.rank)));
        }
        guarded(|| rank_program::compile(rp, collective_steps))?
    } else {
        return Err(PyTypeError::new_err(format!("expected a Plan or a RankPlan, got {}", source.get_type().name()?)));
    };
    let prog = PyRankProgram { inner };
    let layout = prog.layout(py)?;
    Ok((prog, layout))
}

/// Little-endian rows of `W` words of `T` each (`what` names them in errors).
fn rows<const W: usize, T: Copy + Default, const B: usize>(data: &[u8], what: &str, word: fn([u8; B]) -> T) -> PyResult<Vec<[T; W]>> {
    if !data.len().is_multiple_of(W * B) {
        return Err(PyValueError::new_err(format!("{what}: {} bytes is not a whole number of {}-byte rows", data.len(), W * B)));
    }
    Ok(data
        .chunks_exact(W * B)
        .map(|row| {
            let mut out = [T::default(); W];
            for (o, w) in out.iter_mut().zip(row.chunks_exact(B)) {
                *o = word(w.try_into().expect("chunks_exact gives B bytes"));
            }
            out
        })
        .collect())
}

/// A `RankPlan` from rows laid out as `Plan._raw_arrays` (a whole plan's decoded arrays cut
/// to `rank`; see `RankPlan::from_rows`): ids (u32), transfers (9 × u32), segments (5 × u64),
/// deps (u32), the whole plan's `[(step, moving pairs)]` (None: not counted) and the rank's (input, output,
/// scratch) bytes. Raises ValueError naming the first transfer with an unknown op or buffer id.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn _rank_plan_from_rows(rank: u32, num_ranks: u32, ids: &[u8], transfers: &[u8], segments: &[u8], deps: &[u8], moving_pairs: Option<Vec<(u32, u32)>>, sizes: (u64, u64, u64)) -> PyResult<PyRankPlan> {
    let ids: Vec<u32> = rows::<1, u32, 4>(ids, "ids", u32::from_le_bytes)?.into_iter().map(|[x]| x).collect();
    let deps: Vec<u32> = rows::<1, u32, 4>(deps, "deps", u32::from_le_bytes)?.into_iter().map(|[x]| x).collect();
    let t = rows::<9, u32, 4>(transfers, "transfers", u32::from_le_bytes)?;
    let s = rows::<5, u64, 8>(segments, "segments", u64::from_le_bytes)?;
    let inner = guarded(|| RankPlan::from_rows(rank, num_ranks, &ids, &t, &s, &deps, moving_pairs, sizes))?;
    Ok(PyRankPlan { inner })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRankProgram>()?;
    m.add_function(wrap_pyfunction!(_compile_rank_program, m)?)?;
    m.add_function(wrap_pyfunction!(_rank_plan_from_rows, m)?)?;
    Ok(())
}
