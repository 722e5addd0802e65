//! Redistribution at the destination server (FAST §4.2 step 3): bytes that a
//! scale-out transfer parked in the Scratch of GPU (d,c) but that belong to
//! GPU (d,j) move there over scale-up, one transfer per (c, j) pair and round,
//! each segment landing at its torch offset in the Output.
use crate::plan::{Buf, Op, PlanBuilder, Segment};
use crate::topology::Tier;

/// One parked piece: at `holder`'s Scratch `scratch_off`, destined to `owner`'s Output `out_off`.
#[derive(Debug, Clone, Copy)]
pub struct Parked {
    pub holder: u32,
    pub owner: u32,
    pub scratch_off: u64,
    pub out_off: u64,
    pub len: u64,
    /// The scale-out transfer that delivered it.
    pub producer: u32,
}

/// Per-rank bytes sent and received by one round's redistribution.
pub struct RedistributionLoad {
    pub max_out: u64,
    pub max_in: u64,
}

/// Emit the redistribution transfers of one round at `step`; `parked` is consumed (sorted in place).
/// Each (holder, owner) transfer depends on the scale-out transfers that delivered its bytes.
pub fn emit(b: &mut PlanBuilder, parked: &mut Vec<Parked>, step: u32, out_load: &mut [u64], in_load: &mut [u64], touched: &mut Vec<u32>) -> RedistributionLoad {
    // Stable sort keeps the arrival order inside each (holder, owner) group: deterministic.
    parked.sort_by_key(|p| (p.holder, p.owner));
    let mut segs: Vec<Segment> = Vec::new();
    let mut deps: Vec<u32> = Vec::new();
    let mut i = 0;
    touched.clear();
    while i < parked.len() {
        let (h, o) = (parked[i].holder, parked[i].owner);
        segs.clear();
        deps.clear();
        let mut bytes = 0;
        while i < parked.len() && parked[i].holder == h && parked[i].owner == o {
            let p = parked[i];
            segs.push(Segment { src_buf: Buf::Scratch, src_off: p.scratch_off, dst_buf: Buf::Output, dst_off: p.out_off, len: p.len });
            if deps.last() != Some(&p.producer) {
                deps.push(p.producer);
            }
            bytes += p.len;
            i += 1;
        }
        deps.sort_unstable();
        deps.dedup();
        b.transfer(h, o, Op::Copy, Tier::ScaleUp, step, &segs, &deps);
        if out_load[h as usize] == 0 {
            touched.push(h);
        }
        if in_load[o as usize] == 0 {
            touched.push(o);
        }
        out_load[h as usize] += bytes;
        in_load[o as usize] += bytes;
    }
    parked.clear();
    let mut load = RedistributionLoad { max_out: 0, max_in: 0 };
    for &r in touched.iter() {
        load.max_out = load.max_out.max(out_load[r as usize]);
        load.max_in = load.max_in.max(in_load[r as usize]);
        out_load[r as usize] = 0;
        in_load[r as usize] = 0;
    }
    load
}
