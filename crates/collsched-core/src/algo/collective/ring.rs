//! Ring collectives, one ring per channel (see `channels`): channel k carries
//! the k-th of `channels` equal element-aligned parts of every shard (of the
//! buffer, for allreduce) around its own ring order; the channels run side by
//! side. Channel 0 is the ring 0 → 1 → … → P-1 → 0, which with server-major
//! rank order crosses each server boundary once, as NCCL's ring does.
//! Below, "the ring" is one channel's ring and "next" its successor.
//!
//! - allgather: shard c travels c → next(c) → … in P-1 hops (hop h in step h).
//! - reduce_scatter: the partial sum of shard c starts at rank next(c) and ends at
//!   rank c after P-1 hops, each receiver adding its own contribution
//!   (intermediate sums live in scratch, pre-filled with the receiver's input).
//! - allreduce: reduce-scatter of P element-aligned shards into scratch, then an
//!   allgather of the reduced shards into every output (each output byte is
//!   written once).
use super::channels::RingOrder;
use super::{split_aligned, Ctx};
use crate::plan::{Buf, Op, PlanBuilder, Segment};
use crate::topology::Tier;

fn seg(src_buf: Buf, src_off: u64, dst_buf: Buf, dst_off: u64, len: u64) -> Segment {
    Segment { src_buf, src_off, dst_buf, dst_off, len }
}

/// Send shard `c` (already at rank c in `first_src`) around the ring into every
/// other rank's `Output[out_off..]`, hops starting at step `step0 + 1`.
/// `ready[c][j]` are the transfers the first hop of piece j must wait for.
#[allow(clippy::too_many_arguments)]
fn ring_broadcast_shards(ctx: &Ctx, ring: &RingOrder, shards: &[(u64, u64)], first_src: Buf, src_offset_of: impl Fn(u32) -> u64, step0: u32, ready: &[Vec<Vec<u32>>], b: &mut PlanBuilder) {
    let p = ctx.ranks;
    // last[c][j]: transfer that delivered piece j of shard c to its current holder.
    let pieces: Vec<Vec<(u64, u64)>> = shards.iter().map(|s| ctx.pieces(s.1)).collect();
    let mut last: Vec<Vec<Option<u32>>> = pieces.iter().map(|ps| vec![None; ps.len()]).collect();
    for h in 1..p {
        for c in 0..p {
            let (out_off, _) = shards[c as usize];
            let (src, dst) = (ring.after(c, h - 1), ring.after(c, h));
            for (j, &(off, len)) in pieces[c as usize].iter().enumerate() {
                let s = if h == 1 {
                    seg(first_src, src_offset_of(c) + off, Buf::Output, out_off + off, len)
                } else {
                    seg(Buf::Output, out_off + off, Buf::Output, out_off + off, len)
                };
                let deps: Vec<u32> = match last[c as usize][j] {
                    Some(t) => vec![t],
                    None => ready[c as usize].get(j).cloned().unwrap_or_default(),
                };
                let id = b.transfer(src, dst, Op::Copy, ctx.tier(src, dst), step0 + h + j as u32, &[s], &deps);
                last[c as usize][j] = Some(id);
            }
        }
    }
}

pub(crate) fn allgather(ctx: &Ctx, rings: &[RingOrder], shard: u64, b: &mut PlanBuilder) {
    let p = ctx.ranks;
    if shard == 0 {
        return;
    }
    for r in 0..p {
        b.transfer(r, r, Op::Copy, Tier::Local, 0, &[seg(Buf::Input, 0, Buf::Output, r as u64 * shard, shard)], &[]);
    }
    let ready = vec![Vec::new(); p as usize];
    // (no piece waits for anything before its first hop: it leaves from Input)
    for (ring, (part_off, part_len)) in rings.iter().zip(split_aligned(shard, ctx.elem, rings.len() as u64)) {
        let shards: Vec<(u64, u64)> = (0..p).map(|c| (c as u64 * shard + part_off, part_len)).collect();
        ring_broadcast_shards(ctx, ring, &shards, Buf::Input, |_| part_off, 0, &ready, b);
    }
}

/// Reduce-scatter of `shards` (offset, len in every rank's `src` layout) so that
/// rank c ends with the sum of shard c. Intermediate sums go to
/// `Scratch[shard offset]`; the final hop lands in `final_buf[final_off(c)]`.
/// Returns, per shard, the transfer that completed it (None if the shard is empty or P = 1).
fn ring_reduce(ctx: &Ctx, ring: &RingOrder, shards: &[(u64, u64)], init: &[Option<u32>], final_buf: Buf, final_off: impl Fn(u32, u64) -> u64, b: &mut PlanBuilder) -> Vec<Vec<Option<u32>>> {
    let p = ctx.ranks;
    let pieces: Vec<Vec<(u64, u64)>> = shards.iter().map(|s| ctx.pieces(s.1)).collect();
    let mut last: Vec<Vec<Option<u32>>> = pieces.iter().map(|ps| vec![None; ps.len()]).collect();
    for h in 1..p {
        for c in 0..p {
            let (base, _) = shards[c as usize];
            let (src, dst) = (ring.after(c, h), ring.after(c, h + 1));
            for (j, &(off, len)) in pieces[c as usize].iter().enumerate() {
                let src_buf = if h == 1 { Buf::Input } else { Buf::Scratch };
                let (dst_buf, dst_off) = if dst == c { (final_buf, final_off(c, off)) } else { (Buf::Scratch, base + off) };
                let mut deps: Vec<u32> = init[dst as usize].into_iter().collect();
                deps.extend(last[c as usize][j]);
                let s = seg(src_buf, base + off, dst_buf, dst_off, len);
                let id = b.transfer(src, dst, Op::ReduceSum, ctx.tier(src, dst), h + j as u32, &[s], &deps);
                last[c as usize][j] = Some(id);
            }
        }
    }
    last
}

pub(crate) fn reduce_scatter(ctx: &Ctx, rings: &[RingOrder], shard: u64, b: &mut PlanBuilder) {
    let p = ctx.ranks;
    if shard == 0 {
        return;
    }
    let parts = split_aligned(shard, ctx.elem, rings.len() as u64);
    // Each rank starts its own shard's sum in Output, and the parts it relays
    // (all but its own shard's and those it starts: shard c on a ring where c's next is r) in Scratch.
    let mut init = Vec::with_capacity(p as usize);
    for r in 0..p {
        let mut segs = vec![seg(Buf::Input, r as u64 * shard, Buf::Output, 0, shard)];
        for c in (0..p).filter(|&c| c != r) {
            for (ring, &(part_off, part_len)) in rings.iter().zip(&parts) {
                if ring.after(c, 1) != r {
                    let off = c as u64 * shard + part_off;
                    segs.push(seg(Buf::Input, off, Buf::Scratch, off, part_len));
                }
            }
        }
        if segs.len() > 1 {
            b.need_scratch(r, p as u64 * shard);
        }
        init.push(Some(b.transfer(r, r, Op::Copy, Tier::Local, 0, &segs, &[])));
    }
    for (ring, &(part_off, part_len)) in rings.iter().zip(&parts) {
        let shards: Vec<(u64, u64)> = (0..p).map(|c| (c as u64 * shard + part_off, part_len)).collect();
        ring_reduce(ctx, ring, &shards, &init, Buf::Output, |_, off| part_off + off, b);
    }
}

pub(crate) fn allreduce(ctx: &Ctx, rings: &[RingOrder], bytes: u64, b: &mut PlanBuilder) {
    let p = ctx.ranks;
    if bytes == 0 {
        return;
    }
    if p == 1 {
        b.transfer(0, 0, Op::Copy, Tier::Local, 0, &[seg(Buf::Input, 0, Buf::Output, 0, bytes)], &[]);
        return;
    }
    let mut init = Vec::with_capacity(p as usize);
    for r in 0..p {
        b.need_scratch(r, bytes);
        init.push(Some(b.transfer(r, r, Op::Copy, Tier::Local, 0, &[seg(Buf::Input, 0, Buf::Scratch, 0, bytes)], &[])));
    }
    for (ring, (part_off, part_len)) in rings.iter().zip(split_aligned(bytes, ctx.elem, rings.len() as u64)) {
        let shards: Vec<(u64, u64)> = shard_ranges(part_len, ctx.elem, p).into_iter().map(|(o, l)| (part_off + o, l)).collect();
        ring_allreduce_part(ctx, ring, &shards, &init, b);
    }
}

/// Allreduce of the bytes `shards` cover (shard c reduced at rank c) on one ring, in Scratch.
fn ring_allreduce_part(ctx: &Ctx, ring: &RingOrder, shards: &[(u64, u64)], init: &[Option<u32>], b: &mut PlanBuilder) {
    let p = ctx.ranks;
    let done = ring_reduce(ctx, ring, shards, init, Buf::Scratch, |c, off| shards[c as usize].0 + off, b);
    // Rank c holds the sum of shard c in Scratch: copy it to its own output and send it around.
    let rs_steps = p - 1;
    let mut ready = Vec::with_capacity(p as usize);
    for c in 0..p {
        let (base, _) = shards[c as usize];
        let pieces = ctx.pieces(shards[c as usize].1);
        let mut deps = Vec::new();
        for (j, &(off, len)) in pieces.iter().enumerate() {
            let d: Vec<u32> = done[c as usize][j].into_iter().collect();
            b.transfer(c, c, Op::Copy, Tier::Local, rs_steps + 1 + j as u32, &[seg(Buf::Scratch, base + off, Buf::Output, base + off, len)], &d);
            deps.push(d);
        }
        ready.push(deps);
    }
    ring_broadcast_shards(ctx, ring, shards, Buf::Scratch, |c| shards[c as usize].0, rs_steps, &ready, b);
}

/// P element-aligned shards `(offset, len)` covering `bytes`, some possibly empty.
pub(crate) fn shard_ranges(bytes: u64, elem: u64, p: u32) -> Vec<(u64, u64)> {
    let mut out = split_aligned(bytes, elem, p as u64);
    let end = bytes;
    while out.len() < p as usize {
        out.push((end, 0));
    }
    out
}
