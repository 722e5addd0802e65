//! The verifier: symbolic execution of a Plan (see docs/verifier.md).
//!
//! It executes the transfers in id order on symbolic memory, where every byte
//! of every Output and Scratch buffer carries its provenance (which ranks'
//! input, at which input offset), and proves:
//! - structure: ids are a topological order of deps, deps never point to a later
//!   step, tiers match the endpoints, segments lie inside their buffers, Input is
//!   never written, a transfer's destinations do not overlap;
//! - data flow: nothing reads bytes that were never written;
//! - ordering: every two transfers that touch the same bytes with at least one
//!   write (RAW, WAW, WAR) are ordered by deps (ancestor) and by step (strictly
//!   earlier), so every schedule that respects either gives the id-order result;
//! - final state: each Output holds exactly what the collective defines, and for
//!   the copy collectives every Output byte was written once.
//!
//! `verify_with(plan, FinalState::Caller { .. })` keeps every check but the last for
//! producers whose result none of the four collectives states (an MoE combine sums
//! rows of different ranks at different offsets): reduce_sum is then allowed in any
//! plan, and the caller proves the final state itself (e.g. `collsched.moe.plans`).
mod ancestry;
mod contents;
mod final_state;
mod memory;

use self::ancestry::Ancestry;
use self::contents::Content;
use self::memory::{Piece, Region, Run};
use super::{Buf, Collective, Op, Plan};
use crate::error::{Error, Result};
use crate::topology::Tier;

/// What a successful verification measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub transfers: usize,
    pub segments: usize,
    /// 128-bit: relayed bytes count each time they move, which can pass 2^64.
    pub bytes_moved: u128,
    /// Synchronous steps of the plan.
    pub steps: u32,
    /// Ordering obligations proven (one per conflicting pair of accesses found).
    pub conflicts: u64,
    /// Obligations that needed a search through deps beyond the direct dependencies.
    pub ancestor_searches: u64,
}

/// Who proves what the Outputs hold at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FinalState {
    /// The verifier, against the plan's collective (the default).
    #[default]
    Collective,
    /// The caller: for plans whose result the collective cannot state. The collective
    /// then only gives the buffer sizes; reduce_sum is allowed in any plan, its segments in
    /// whole `elem_bytes` elements, and what it adds is not tracked (nor, for copy
    /// collectives, may a copy land twice on an Output byte). All other checks run.
    Caller { elem_bytes: u64 },
}

/// Verify `plan`; the error names the first violating transfer (or the final-state mismatch).
pub fn verify(plan: &Plan) -> Result<VerifyReport> {
    verify_with(plan, FinalState::Collective)
}

/// `verify`, with the final state proven as `final_state` says.
pub fn verify_with(plan: &Plan, final_state: FinalState) -> Result<VerifyReport> {
    plan.check_shape().map_err(|e| Error::Verification(format!("malformed plan: {e}")))?;
    check_header(plan)?;
    let mut ex = Executor::new(plan, final_state);
    for id in 0..plan.transfers.len() as u32 {
        ex.execute(id)?;
    }
    if final_state == FinalState::Collective {
        let outputs: Vec<&Region> = (0..plan.num_ranks()).map(|r| &ex.regions[region_index(r, Buf::Output)]).collect();
        final_state::check_outputs(plan, &outputs)?;
    }
    Ok(VerifyReport {
        transfers: plan.transfers.len(),
        segments: plan.segments.len(),
        bytes_moved: ex.bytes_moved,
        steps: plan.num_steps(),
        conflicts: ex.conflicts,
        ancestor_searches: ex.ancestry.searches,
    })
}

/// Header facts the transfers cannot show: an all-to-all is always planned for a cluster,
/// so its server size is known (0 is the "no cluster" marker of collective and forest plans).
/// An all-to-all plan's `input_hash` must belong to its own matrix: it is recomputed from the
/// plan's traffic and the `setting_hash` the planner recorded in `meta` (plans without one,
/// made elsewhere or with `input_hash` 0, say nothing about their inputs and are not checked).
fn check_header(plan: &Plan) -> Result<()> {
    check_scratch_sizes(plan)?;
    if matches!(plan.collective, crate::plan::Collective::AllToAll { .. }) && plan.gpus_per_server == 0 {
        return Err(Error::Verification(
            "malformed plan: gpus_per_server is 0, but an all-to-all plan is made for a cluster with at least 1 GPU per server".into(),
        ));
    }
    if let crate::plan::Collective::AllToAll { traffic } = &plan.collective {
        if let Some(text) = plan.meta.get(crate::algo::SETTING_HASH) {
            let setting = u64::from_str_radix(text, 16).ok().filter(|_| text.len() == 16).ok_or_else(|| {
                Error::Verification(format!("malformed plan: meta {} must be 16 hex digits, got {text:?}", crate::algo::SETTING_HASH))
            })?;
            let t = traffic.hash();
            let want = crate::algo::compose_input_hash(t, setting);
            if plan.input_hash != want {
                return Err(Error::Verification(format!(
                    "input_hash {:016x} does not match the plan's traffic (traffic hash {t:016x} with setting_hash {setting:016x} \
                     gives input_hash {want:016x}): the matrix or the input_hash was changed after planning",
                    plan.input_hash
                )));
            }
        }
    }
    Ok(())
}

/// Scratch sizes no device holds (2^48 bytes = 256 TiB and more) are accepted only where the
/// plan's own segments reach that far: otherwise the field is damaged, and a runtime would try
/// to allocate it.
pub const MAX_PLAUSIBLE_SCRATCH: u64 = 1 << 48;

fn check_scratch_sizes(plan: &Plan) -> Result<()> {
    if plan.scratch_bytes.iter().all(|&s| s < MAX_PLAUSIBLE_SCRATCH) {
        return Ok(());
    }
    let mut used = vec![0u64; plan.scratch_bytes.len()];
    for t in &plan.transfers {
        for s in &plan.segments[t.seg_range()] {
            if s.src_buf == Buf::Scratch {
                used[t.src as usize] = used[t.src as usize].max(s.src_off.saturating_add(s.len));
            }
            if s.dst_buf == Buf::Scratch {
                used[t.dst as usize] = used[t.dst as usize].max(s.dst_off.saturating_add(s.len));
            }
        }
    }
    for (rank, (&size, &end)) in plan.scratch_bytes.iter().zip(&used).enumerate() {
        if size >= MAX_PLAUSIBLE_SCRATCH && size > end {
            return Err(Error::Verification(format!(
                "malformed plan: rank {rank}'s scratch_bytes is {size}, at least 2^48 bytes (256 TiB, more than any device holds) \
                 while its transfers use {end} bytes of scratch: the field is damaged"
            )));
        }
    }
    Ok(())
}

/// `transfer 17 (rank 3→5, scale_out, step 2)`: how every message names a transfer.
pub fn describe_transfer(plan: &Plan, id: u32) -> String {
    let t = &plan.transfers[id as usize];
    format!("transfer {id} (rank {}→{}, {}, step {})", t.src, t.dst, t.tier.name(), t.step)
}

fn region_index(rank: u32, buf: Buf) -> usize {
    rank as usize * 2 + (buf == Buf::Scratch) as usize
}

fn span(buf: Buf, lo: u64, hi: u64) -> String {
    format!("{}[{lo:#x}..{hi:#x})", buf.name())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Hazard {
    ReadAfterWrite,
    WriteAfterWrite,
    WriteAfterRead,
}

/// An ordering obligation: transfer `pred` must precede the current transfer.
struct Need {
    pred: u32,
    seg: usize,
    hazard: Hazard,
    rank: u32,
    buf: Buf,
    lo: u64,
    hi: u64,
}

struct Executor<'p> {
    plan: &'p Plan,
    ranks: u32,
    /// AllToAll and AllGather: plain copies, every Output byte lands once.
    copy_only: bool,
    /// The caller proves the final state: reduce_sum allowed, its sums not tracked.
    caller: bool,
    elem_bytes: u64,
    input_sizes: Vec<u64>,
    output_sizes: Vec<u64>,
    /// Output and Scratch of every rank (Input is immutable and needs no map).
    regions: Vec<Region>,
    ancestry: Ancestry,
    needs: Vec<Need>,
    pieces: Vec<Piece>,
    dst_spans: Vec<(Buf, u64, u64, usize)>,
    bytes_moved: u128,
    conflicts: u64,
}

impl<'p> Executor<'p> {
    fn new(plan: &'p Plan, final_state: FinalState) -> Executor<'p> {
        let ranks = plan.num_ranks();
        let (copy_only, mut elem_bytes) = match &plan.collective {
            Collective::AllToAll { .. } | Collective::AllGather { .. } => (true, 1),
            Collective::ReduceScatter { elem_bytes, .. } | Collective::AllReduce { elem_bytes, .. } => (false, (*elem_bytes).max(1) as u64),
        };
        let caller = matches!(final_state, FinalState::Caller { .. });
        if let FinalState::Caller { elem_bytes: e } = final_state {
            elem_bytes = e.max(1);
        }
        let (input_sizes, output_sizes) = match &plan.collective {
            Collective::AllToAll { traffic } => (traffic.input_sizes(), traffic.output_sizes()),
            c => ((0..ranks).map(|r| c.input_size(r)).collect(), (0..ranks).map(|r| c.output_size(r)).collect()),
        };
        Executor {
            plan,
            ranks,
            copy_only,
            caller,
            elem_bytes,
            input_sizes,
            output_sizes,
            regions: (0..ranks as usize * 2).map(|_| Region::default()).collect(),
            ancestry: Ancestry::new(plan.transfers.len()),
            needs: Vec::new(),
            pieces: Vec::new(),
            dst_spans: Vec::new(),
            bytes_moved: 0,
            conflicts: 0,
        }
    }

    fn buffer_size(&self, rank: u32, buf: Buf) -> u64 {
        match buf {
            Buf::Input => self.input_sizes[rank as usize],
            Buf::Output => self.output_sizes[rank as usize],
            Buf::Scratch => self.plan.scratch_bytes[rank as usize],
        }
    }

    fn fail(&self, id: u32, seg: Option<usize>, what: String) -> Error {
        let at = match seg {
            Some(s) => format!(", segment {s}"),
            None => String::new(),
        };
        Error::Verification(format!("{}{at}: {what}", describe_transfer(self.plan, id)))
    }

    fn execute(&mut self, id: u32) -> Result<()> {
        self.check_structure(id)?;
        self.check_segments(id)?;
        self.needs.clear();
        let t = self.plan.transfers[id as usize];
        for (k, seg) in self.plan.segments_of(&t).iter().enumerate() {
            self.bytes_moved += u128::from(seg.len);
            if let Err(e) = self.flow(id, k) {
                // An ordering violation found on an earlier access explains more than what follows from it.
                self.check_needs(id)?;
                return Err(e);
            }
        }
        self.check_needs(id)
    }

    /// Tier, dependency order and op.
    fn check_structure(&self, id: u32) -> Result<()> {
        let plan = self.plan;
        let t = &plan.transfers[id as usize];
        let gps = plan.gpus_per_server;
        let want = if t.src == t.dst {
            Tier::Local
        } else if gps == 0 {
            // Without the server size only "local iff same rank" can be checked.
            if t.tier == Tier::Local {
                return Err(self.fail(id, None, format!("tier is local but rank {} ≠ rank {}", t.src, t.dst)));
            }
            t.tier
        } else if t.src / gps == t.dst / gps {
            Tier::ScaleUp
        } else {
            Tier::ScaleOut
        };
        if t.tier != want {
            return Err(self.fail(
                id,
                None,
                format!("tier is {} but rank {}→{} with {} GPUs per server is {}", t.tier.name(), t.src, t.dst, gps, want.name()),
            ));
        }
        for &d in plan.deps_of(t) {
            if d >= id {
                return Err(self.fail(id, None, format!("depends on transfer {d}, which does not come earlier (ids must be a topological order of deps)")));
            }
            let ds = plan.transfers[d as usize].step;
            if ds > t.step {
                return Err(self.fail(id, None, format!("depends on {}, whose step {ds} is after its own step {}", describe_transfer(plan, d), t.step)));
            }
        }
        if t.op == Op::ReduceSum && self.copy_only && !self.caller {
            return Err(self.fail(id, None, format!("reduce_sum in a {} plan (copy collectives only copy)", plan.collective.name())));
        }
        Ok(())
    }

    /// Bounds, read-only Input, alignment of reductions, overlapping destinations.
    fn check_segments(&mut self, id: u32) -> Result<()> {
        let plan = self.plan;
        let t = plan.transfers[id as usize];
        let segs = plan.segments_of(&t);
        self.dst_spans.clear();
        for (k, s) in segs.iter().enumerate() {
            if s.dst_buf == Buf::Input {
                return Err(self.fail(id, Some(k), format!("writes into input[{:#x}..) of rank {} (inputs are read-only)", s.dst_off, t.dst)));
            }
            for (side, rank, buf, off) in [("source", t.src, s.src_buf, s.src_off), ("destination", t.dst, s.dst_buf, s.dst_off)] {
                let size = self.buffer_size(rank, buf);
                match off.checked_add(s.len) {
                    Some(end) if end <= size => {}
                    Some(end) => {
                        return Err(self.fail(id, Some(k), format!("{side} {} on rank {rank} lies outside the buffer of {size:#x} bytes", span(buf, off, end))));
                    }
                    None => return Err(self.fail(id, Some(k), format!("{side} {}[{off:#x}..) + {:#x} bytes overflows", buf.name(), s.len))),
                }
            }
            if t.op == Op::ReduceSum {
                let e = self.elem_bytes;
                if s.src_off % e != 0 || s.dst_off % e != 0 || s.len % e != 0 {
                    return Err(self.fail(
                        id,
                        Some(k),
                        format!("reduce_sum segment (src_off {:#x}, dst_off {:#x}, len {:#x}) is not aligned to the {e}-byte element", s.src_off, s.dst_off, s.len),
                    ));
                }
            }
            if s.len > 0 {
                self.dst_spans.push((s.dst_buf, s.dst_off, s.dst_off + s.len, k));
            }
        }
        if self.dst_spans.len() > 1 {
            self.dst_spans.sort_unstable();
            for w in self.dst_spans.windows(2) {
                let ((b0, _, hi0, k0), (b1, lo1, hi1, k1)) = (w[0], w[1]);
                if b0 == b1 && lo1 < hi0 {
                    let (first, second) = (k0.min(k1), k0.max(k1));
                    return Err(self.fail(id, Some(second), format!("destination {} overlaps the destination of segment {first}", span(b1, lo1, hi1.min(hi0)))));
                }
            }
        }
        if t.src == t.dst {
            // A local copy must not read what it writes: the result would depend on copy order.
            for (k, s) in segs.iter().enumerate() {
                if s.src_buf == Buf::Input || s.len == 0 {
                    continue;
                }
                let (lo, hi) = (s.src_off, s.src_off + s.len);
                let after = self.dst_spans.partition_point(|&(b, dlo, _, _)| (b, dlo) < (s.src_buf, hi));
                if after > 0 {
                    let (b, dlo, dhi, dk) = self.dst_spans[after - 1];
                    if b == s.src_buf && dhi > lo {
                        return Err(self.fail(id, Some(k), format!("source {} overlaps the destination of segment {dk}", span(b, lo.max(dlo), hi.min(dhi)))));
                    }
                }
            }
        }
        Ok(())
    }

    /// Symbolically execute segment `k` of transfer `id`, recording ordering obligations.
    fn flow(&mut self, id: u32, k: usize) -> Result<()> {
        let plan = self.plan;
        let t = plan.transfers[id as usize];
        let s = plan.segments_of(&t)[k];
        if s.len == 0 {
            return Ok(());
        }
        let (src_lo, src_hi) = (s.src_off, s.src_off + s.len);
        self.pieces.clear();
        if s.src_buf == Buf::Input {
            self.pieces.push(Piece { lo: src_lo, hi: src_hi, content: Content::input(t.src, src_lo), writer: None });
        } else {
            let region = &mut self.regions[region_index(t.src, s.src_buf)];
            if let Err((a, b)) = region.read(src_lo, src_hi, id, &mut self.pieces) {
                return Err(self.fail(id, Some(k), format!("reads bytes of {} on rank {} never written", span(s.src_buf, a, b), t.src)));
            }
            for p in &self.pieces {
                let w = p.writer.expect("written bytes have a writer");
                if self.needs.last().is_none_or(|n| n.pred != w || n.hazard != Hazard::ReadAfterWrite) {
                    self.needs.push(Need { pred: w, seg: k, hazard: Hazard::ReadAfterWrite, rank: t.src, buf: s.src_buf, lo: p.lo, hi: p.hi });
                }
            }
        }
        // Where each read piece lands.
        let shift = |x: u64| s.dst_off + (x - src_lo);
        let (dst_lo, dst_hi) = (s.dst_off, s.dst_off + s.len);
        let ri = region_index(t.dst, s.dst_buf);
        match t.op {
            Op::Copy => {
                let new_runs = self.pieces.iter().map(|p| (shift(p.lo), Run { end: shift(p.hi), content: p.content.clone(), writer: id, readers: Vec::new() }));
                if self.regions[ri].is_empty_in(dst_lo, dst_hi) {
                    // First write of these bytes: nothing to order against.
                    self.regions[ri].insert_into_empty(new_runs);
                    return Ok(());
                }
                let once = self.copy_only && s.dst_buf == Buf::Output;
                for (&start, run) in self.regions[ri].runs_in(dst_lo, dst_hi, &[]) {
                    if once {
                        return Err(Error::Verification(format!(
                            "{}, segment {k}: writes {} on rank {} already written by {} (every output byte must land exactly once)",
                            describe_transfer(plan, id),
                            span(s.dst_buf, start, run.end),
                            t.dst,
                            describe_transfer(plan, run.writer)
                        )));
                    }
                    push_write_needs(&mut self.needs, run, k, t.dst, s.dst_buf, start);
                }
                self.regions[ri].overwrite(dst_lo, dst_hi, new_runs);
            }
            Op::ReduceSum => {
                let cuts: Vec<u64> = self.pieces.iter().map(|p| shift(p.lo)).collect();
                let (ranks, elem, caller) = (self.ranks, self.elem_bytes, self.caller);
                let mut at = dst_lo;
                let mut piece = 0;
                for (&start, run) in self.regions[ri].runs_in(dst_lo, dst_hi, &cuts) {
                    if start > at {
                        return Err(Error::Verification(format!(
                            "{}, segment {k}: adds into {} on rank {}, which was never written (reduce_sum needs an initialised destination)",
                            describe_transfer(plan, id),
                            span(s.dst_buf, at, start),
                            t.dst
                        )));
                    }
                    if caller {
                        // Only the ordering is proven here; the caller checks what the sums hold.
                        push_write_needs(&mut self.needs, run, k, t.dst, s.dst_buf, start);
                        run.writer = id;
                        run.readers.clear();
                        at = run.end;
                        continue;
                    }
                    while shift(self.pieces[piece].hi) <= start {
                        piece += 1;
                    }
                    let p = &self.pieces[piece];
                    let incoming = p.content.shifted(start - shift(p.lo));
                    let len = run.end - start;
                    if incoming.off % elem != (start - dst_lo) % elem {
                        return Err(Error::Verification(format!(
                            "{}, segment {k}: adds {} whose elements do not line up with the segment's {elem}-byte elements",
                            describe_transfer(plan, id),
                            incoming.describe(len, ranks)
                        )));
                    }
                    let mismatch = |why: String| {
                        Error::Verification(format!(
                            "{}, segment {k}: adds {} onto {} at {} of rank {}: {why}",
                            describe_transfer(plan, id),
                            incoming.describe(len, ranks),
                            run.content.describe(len, ranks),
                            span(s.dst_buf, start, run.end),
                            t.dst
                        ))
                    };
                    if incoming.off != run.content.off {
                        return Err(mismatch("the input offsets differ".into()));
                    }
                    let sum = match run.content.origin.add(&incoming.origin, ranks) {
                        Ok(sum) => sum,
                        Err(r) => return Err(mismatch(format!("rank {r} would be counted twice"))),
                    };
                    push_write_needs(&mut self.needs, run, k, t.dst, s.dst_buf, start);
                    run.content.origin = sum;
                    run.writer = id;
                    run.readers.clear();
                    at = run.end;
                }
                if at < dst_hi {
                    return Err(Error::Verification(format!(
                        "{}, segment {k}: adds into {} on rank {}, which was never written (reduce_sum needs an initialised destination)",
                        describe_transfer(plan, id),
                        span(s.dst_buf, at, dst_hi),
                        t.dst
                    )));
                }
            }
        }
        Ok(())
    }

    /// Prove every recorded obligation: the earlier transfer is in a strictly
    /// earlier step and an ancestor through deps.
    fn check_needs(&mut self, id: u32) -> Result<()> {
        if self.needs.is_empty() {
            return Ok(());
        }
        let plan = self.plan;
        let step = plan.transfers[id as usize].step;
        self.conflicts += self.needs.len() as u64;
        for n in &self.needs {
            let ps = plan.transfers[n.pred as usize].step;
            if ps >= step {
                return Err(self.hazard_error(id, n, format!("which runs in step {ps}, not before step {step}")));
            }
        }
        self.ancestry.mark_for(plan, id, self.needs.iter().map(|n| n.pred));
        if let Some(n) = self.needs.iter().find(|n| !self.ancestry.is_marked(n.pred)) {
            return Err(self.hazard_error(id, n, "which is not an ancestor through deps".into()));
        }
        Ok(())
    }

    fn hazard_error(&self, id: u32, n: &Need, problem: String) -> Error {
        let where_ = format!("{} on rank {}", span(n.buf, n.lo, n.hi), n.rank);
        let other = describe_transfer(self.plan, n.pred);
        let what = match n.hazard {
            Hazard::ReadAfterWrite => format!("reads {where_} written by {other}, {problem}"),
            Hazard::WriteAfterWrite => format!("overwrites {where_} written by {other}, {problem}"),
            Hazard::WriteAfterRead => format!("overwrites {where_} while {other} still reads it, {problem}"),
        };
        self.fail(id, Some(n.seg), what)
    }
}

/// A write over `run` must wait for its writer (WAW) and its readers (WAR).
fn push_write_needs(needs: &mut Vec<Need>, run: &Run, seg: usize, rank: u32, buf: Buf, start: u64) {
    let mut add = |pred: u32, hazard: Hazard| {
        if !needs.last().is_some_and(|n| n.pred == pred && n.hazard == hazard) {
            needs.push(Need { pred, seg, hazard, rank, buf, lo: start, hi: run.end });
        }
    };
    add(run.writer, Hazard::WriteAfterWrite);
    for &r in &run.readers {
        add(r, Hazard::WriteAfterRead);
    }
}
