//! Redistribution at the destination server (FAST §4.2 step 3): bytes that a
//! scale-out transfer parked in the Scratch of GPU (d,c) but that belong to
//! GPU (d,j) move there over scale-up, one transfer per (c, j) pair and round,
//! each segment landing at its torch offset in the Output.
use crate::plan::{Buf, Op, PlanBuilder, Segment};
use crate::topology::Tier;

/// Groups the pieces one scale-out transfer parked, by owner, and emits the
/// redistribution transfers; keeps per-round loads for the predictor.
#[derive(Default)]
pub struct Redistributor {
    /// Per local owner index: Scratch → Output segments waiting to be emitted.
    buckets: Vec<Vec<Segment>>,
    /// Bytes parked per owner (summed while parking, not rescanned at emission).
    bucket_bytes: Vec<u64>,
    /// Bit j set when bucket j holds segments (most scale-out transfers park nothing,
    /// the others a few owners): emission visits only those, in owner order.
    nonempty: Vec<u64>,
    any: bool,
    /// Whether this round's loads are kept: the predictor needs only the last round's, and
    /// tracking them costs a branchy update per transfer.
    tracking: bool,
    out_load: Vec<u64>,
    in_load: Vec<u64>,
    touched: Vec<u32>,
}

impl Redistributor {
    pub fn new(ranks: usize, gpus: usize) -> Redistributor {
        let mut r = Redistributor::default();
        r.reset(ranks, gpus);
        r
    }

    /// Empty state for `ranks` ranks of `gpus` per server, reusing the allocations.
    pub fn reset(&mut self, ranks: usize, gpus: usize) {
        self.buckets.resize_with(gpus, Vec::new);
        self.buckets.truncate(gpus);
        self.buckets.iter_mut().for_each(Vec::clear);
        super::balance::refill(&mut self.bucket_bytes, gpus, 0);
        super::balance::refill(&mut self.nonempty, gpus.div_ceil(64), 0);
        self.any = false;
        self.tracking = false;
        super::balance::refill(&mut self.out_load, ranks, 0);
        super::balance::refill(&mut self.in_load, ranks, 0);
        self.touched.clear();
    }

    /// Park `len` bytes at `holder`'s Scratch `scratch_off`, owned by local GPU `owner` (Output `out_off`).
    #[inline]
    pub fn park(&mut self, owner: usize, scratch_off: u64, out_off: u64, len: u64) {
        self.bucket_bytes[owner] += len;
        self.nonempty[owner / 64] |= 1 << (owner % 64);
        self.any = true;
        super::pipeline::push_merged(&mut self.buckets[owner], Segment { src_buf: Buf::Scratch, src_off: scratch_off, dst_buf: Buf::Output, dst_off: out_off, len });
    }

    /// Emit what `producer` (the scale-out transfer into `holder`) parked, one transfer per
    /// owner in owner order, at `step`; `server_base` is the first rank of the holder's server.
    pub fn emit(&mut self, b: &mut PlanBuilder, holder: u32, server_base: u32, producer: u32, step: u32) {
        if !self.any {
            return;
        }
        self.any = false;
        for w in 0..self.nonempty.len() {
            let mut bits = std::mem::take(&mut self.nonempty[w]);
            while bits != 0 {
                let j = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                self.emit_bucket(b, j, holder, server_base, producer, step);
            }
        }
    }

    /// One redistribution transfer: bucket `j`'s segments to owner `server_base + j`.
    #[inline]
    fn emit_bucket(&mut self, b: &mut PlanBuilder, j: usize, holder: u32, server_base: u32, producer: u32, step: u32) {
        let bucket = &mut self.buckets[j];
        let owner = server_base + j as u32;
        let bytes = std::mem::take(&mut self.bucket_bytes[j]);
        // Parked segments are never empty: copy them straight into the plan.
        let (segs, deps) = b.lists_mut();
        let (seg_begin, dep_begin) = (segs.len(), deps.len());
        for &seg in bucket.iter() {
            segs.push(seg); // short lists: cheaper than a memcpy call
        }
        deps.push(producer);
        b.close_transfer(holder, owner, Op::Copy, Tier::ScaleUp, step, seg_begin, dep_begin);
        bucket.clear();
        if !self.tracking {
            return;
        }
        for (r, load) in [(holder, &mut self.out_load), (owner, &mut self.in_load)] {
            if load[r as usize] == 0 {
                self.touched.push(r);
            }
            load[r as usize] += bytes;
        }
    }

    /// Keep the loads of the round about to be emitted (for `finish_round`), or not.
    pub fn track_loads(&mut self, on: bool) {
        self.tracking = on;
    }

    /// Close a round: the largest bytes any GPU sent or received in its redistribution
    /// (0 unless its loads were tracked).
    pub fn finish_round(&mut self) -> u64 {
        let mut max = 0;
        for &r in &self.touched {
            max = max.max(self.out_load[r as usize]).max(self.in_load[r as usize]);
            self.out_load[r as usize] = 0;
            self.in_load[r as usize] = 0;
        }
        self.touched.clear();
        max
    }
}
