//! Single-root binary tree at rank 0 (heap numbering: parent of i is (i-1)/2).
//! Simple and latency-friendly, but every byte crosses the root's links, so its
//! bandwidth is far below a ring or a forest: it is a baseline, not a contender.
//!
//! - allgather: gather every shard up to the root (node i forwards its
//!   subtree's shards when its children are done, in step 1 + height(i)), then
//!   broadcast down: each child gets exactly the shards outside its own subtree.
//! - reduce_scatter: reduce the whole input up to the root (partial sums in
//!   scratch), then scatter down: each child gets the sums of its subtree's shards.
//! - allreduce: reduce up into scratch, then broadcast the sum into every output.
//!
//! Siblings add into the same parent region in order (the later one depends on
//! the earlier one), so no two reductions into one byte are unordered.
use super::Ctx;
use crate::plan::{Buf, Op, PlanBuilder, Segment};
use crate::topology::Tier;

fn seg(src_buf: Buf, src_off: u64, dst_buf: Buf, dst_off: u64, len: u64) -> Segment {
    Segment { src_buf, src_off, dst_buf, dst_off, len }
}

struct Tree {
    p: u32,
    height: Vec<u32>,
    depth: Vec<u32>,
    /// Non-root nodes, children before parents: sorted by (height, index).
    bottom_up: Vec<u32>,
}

impl Tree {
    fn new(p: u32) -> Tree {
        let mut height = vec![0u32; p as usize];
        for i in (1..p).rev() {
            let q = ((i - 1) / 2) as usize;
            height[q] = height[q].max(height[i as usize] + 1);
        }
        let mut depth = vec![0u32; p as usize];
        for i in 1..p {
            depth[i as usize] = depth[((i - 1) / 2) as usize] + 1;
        }
        let mut bottom_up: Vec<u32> = (1..p).collect();
        bottom_up.sort_by_key(|&i| (height[i as usize], i));
        Tree { p, height, depth, bottom_up }
    }
    fn parent(&self, i: u32) -> u32 {
        (i - 1) / 2
    }
    fn children(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        [2 * i + 1, 2 * i + 2].into_iter().filter(move |&c| c < self.p)
    }
    fn is_leaf(&self, i: u32) -> bool {
        2 * i + 1 >= self.p
    }
    /// Ranks in the subtree of `i`, ascending.
    fn subtree(&self, i: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut stack = vec![i];
        while let Some(x) = stack.pop() {
            out.push(x);
            stack.extend(self.children(x));
        }
        out.sort_unstable();
        out
    }
    /// Top-down order for the broadcast phase: root, then by depth.
    fn top_down(&self) -> Vec<u32> {
        let mut v: Vec<u32> = (0..self.p).collect();
        v.sort_by_key(|&i| (self.depth[i as usize], i));
        v
    }
    fn root_height(&self) -> u32 {
        self.height[0]
    }
}

/// Merge ranks into maximal runs of consecutive ranks: `[(first, count)]`.
fn runs(ranks: impl Iterator<Item = u32>) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for r in ranks {
        match out.last_mut() {
            Some((f, n)) if *f + *n == r => *n += 1,
            _ => out.push((r, 1)),
        }
    }
    out
}

pub(crate) fn allgather(ctx: &Ctx, shard: u64, b: &mut PlanBuilder) {
    let p = ctx.ranks;
    if shard == 0 {
        return;
    }
    let t = Tree::new(p);
    let init: Vec<u32> = (0..p).map(|r| b.transfer(r, r, Op::Copy, Tier::Local, 0, &[seg(Buf::Input, 0, Buf::Output, r as u64 * shard, shard)], &[])).collect();
    let subtrees: Vec<Vec<u32>> = (0..p).map(|i| t.subtree(i)).collect();
    let pieces = ctx.pieces(shard);
    let h = t.root_height();
    for (j, &(off, len)) in pieces.iter().enumerate() {
        let j = j as u32;
        // gather_in[i]: transfers that delivered piece j of i's descendants to i.
        let mut gather_in: Vec<Vec<u32>> = vec![Vec::new(); p as usize];
        for &i in &t.bottom_up {
            let mut segs = vec![seg(Buf::Input, off, Buf::Output, i as u64 * shard + off, len)];
            for &d in &subtrees[i as usize][..] {
                if d != i {
                    let o = d as u64 * shard + off;
                    segs.push(seg(Buf::Output, o, Buf::Output, o, len));
                }
            }
            let q = t.parent(i);
            let deps = gather_in[i as usize].clone();
            let id = b.transfer(i, q, Op::Copy, ctx.tier(i, q), 1 + t.height[i as usize] + j, &segs, &deps);
            gather_in[q as usize].push(id);
        }
        let mut bcast_in: Vec<Option<u32>> = vec![None; p as usize];
        for i in t.top_down() {
            for c in t.children(i) {
                let sub = &subtrees[c as usize];
                let outside = (0..p).filter(|x| sub.binary_search(x).is_err());
                let segs: Vec<Segment> = runs(outside)
                    .into_iter()
                    .flat_map(|(f, n)| {
                        (0..n).map(move |k| {
                            let o = (f + k) as u64 * shard + off;
                            seg(Buf::Output, o, Buf::Output, o, len)
                        })
                    })
                    .collect();
                let mut deps = vec![init[i as usize]];
                deps.extend(&gather_in[i as usize]);
                deps.extend(bcast_in[i as usize]);
                let id = b.transfer(i, c, Op::Copy, ctx.tier(i, c), h + 1 + t.depth[i as usize] + j, &segs, &deps);
                bcast_in[c as usize] = Some(id);
            }
        }
    }
}

/// Step (for piece 0) in which each non-root node adds its subtree's sum into its
/// parent: after its own children, and strictly after the sibling that added into
/// the same parent region before it (two additions into one byte may not share a
/// step). Returns the steps and the last step of an addition into the root.
fn reduce_steps(t: &Tree) -> (Vec<u32>, u32) {
    let p = t.p as usize;
    let mut step = vec![0u32; p];
    // Step 0 holds the local copies that seed every parent's scratch.
    let mut last_into = vec![0u32; p];
    let mut ready = vec![1u32; p];
    for &i in &t.bottom_up {
        let (i, q) = (i as usize, t.parent(i) as usize);
        step[i] = ready[i].max(last_into[q] + 1);
        last_into[q] = step[i];
        ready[q] = ready[q].max(step[i] + 1);
    }
    (step, last_into[0])
}

/// Reduce every rank's `region` (list of (offset, len) pieces of its input, one
/// transfer per piece list) up the tree into scratch. Returns, per piece, the
/// transfers into the root, and the step of the last one for piece 0.
/// `scratch_init[i]` is the local copy that seeded node i's scratch.
fn reduce_up(ctx: &Ctx, t: &Tree, piece_segs: &[Vec<(u64, u64)>], scratch_init: &[Option<u32>], b: &mut PlanBuilder) -> (Vec<Vec<u32>>, u32) {
    let p = ctx.ranks;
    let (steps, root_done) = reduce_steps(t);
    let mut into_root = Vec::new();
    for (j, ranges) in piece_segs.iter().enumerate() {
        let j = j as u32;
        let mut reduce_in: Vec<Vec<u32>> = vec![Vec::new(); p as usize];
        for &i in &t.bottom_up {
            let src_buf = if t.is_leaf(i) { Buf::Input } else { Buf::Scratch };
            let segs: Vec<Segment> = ranges.iter().map(|&(o, l)| seg(src_buf, o, Buf::Scratch, o, l)).collect();
            let q = t.parent(i);
            let mut deps = reduce_in[i as usize].clone();
            deps.extend(scratch_init[i as usize]);
            deps.extend(scratch_init[q as usize]);
            // Order after the sibling that added into the same parent region before.
            deps.extend(reduce_in[q as usize].last());
            let id = b.transfer(i, q, Op::ReduceSum, ctx.tier(i, q), steps[i as usize] + j, &segs, &deps);
            reduce_in[q as usize].push(id);
        }
        into_root.push(std::mem::take(&mut reduce_in[0]));
    }
    (into_root, root_done)
}

fn seed_scratch(t: &Tree, total: u64, b: &mut PlanBuilder) -> Vec<Option<u32>> {
    (0..t.p)
        .map(|i| {
            if t.is_leaf(i) {
                None
            } else {
                b.need_scratch(i, total);
                Some(b.transfer(i, i, Op::Copy, Tier::Local, 0, &[seg(Buf::Input, 0, Buf::Scratch, 0, total)], &[]))
            }
        })
        .collect()
}

pub(crate) fn reduce_scatter(ctx: &Ctx, shard: u64, b: &mut PlanBuilder) {
    let p = ctx.ranks;
    if shard == 0 {
        return;
    }
    if p == 1 {
        b.transfer(0, 0, Op::Copy, Tier::Local, 0, &[seg(Buf::Input, 0, Buf::Output, 0, shard)], &[]);
        return;
    }
    let t = Tree::new(p);
    let total = p as u64 * shard;
    let init = seed_scratch(&t, total, b);
    let pieces = ctx.pieces(shard);
    let piece_segs: Vec<Vec<(u64, u64)>> = pieces.iter().map(|&(off, len)| (0..p).map(|x| (x as u64 * shard + off, len)).collect()).collect();
    let (into_root, h) = reduce_up(ctx, &t, &piece_segs, &init, b);
    let subtrees: Vec<Vec<u32>> = (0..p).map(|i| t.subtree(i)).collect();
    for (j, &(off, len)) in pieces.iter().enumerate() {
        let j = j as u32;
        b.transfer(0, 0, Op::Copy, Tier::Local, h + 1 + j, &[seg(Buf::Scratch, off, Buf::Output, off, len)], &into_root[j as usize]);
        let mut scatter_in: Vec<Option<u32>> = vec![None; p as usize];
        for i in t.top_down() {
            for c in t.children(i) {
                let segs: Vec<Segment> = subtrees[c as usize]
                    .iter()
                    .map(|&x| {
                        let o = x as u64 * shard + off;
                        if x == c {
                            seg(Buf::Scratch, o, Buf::Output, off, len)
                        } else {
                            seg(Buf::Scratch, o, Buf::Scratch, o, len)
                        }
                    })
                    .collect();
                let deps: Vec<u32> = if i == 0 { into_root[j as usize].clone() } else { scatter_in[i as usize].into_iter().collect() };
                let id = b.transfer(i, c, Op::Copy, ctx.tier(i, c), h + 1 + t.depth[i as usize] + j, &segs, &deps);
                scatter_in[c as usize] = Some(id);
            }
        }
    }
}

pub(crate) fn allreduce(ctx: &Ctx, bytes: u64, b: &mut PlanBuilder) {
    let p = ctx.ranks;
    if bytes == 0 {
        return;
    }
    if p == 1 {
        b.transfer(0, 0, Op::Copy, Tier::Local, 0, &[seg(Buf::Input, 0, Buf::Output, 0, bytes)], &[]);
        return;
    }
    let t = Tree::new(p);
    let init = seed_scratch(&t, bytes, b);
    let pieces = ctx.pieces(bytes);
    let piece_segs: Vec<Vec<(u64, u64)>> = pieces.iter().map(|&pc| vec![pc]).collect();
    let (into_root, h) = reduce_up(ctx, &t, &piece_segs, &init, b);
    for (j, &(off, len)) in pieces.iter().enumerate() {
        let j = j as u32;
        b.transfer(0, 0, Op::Copy, Tier::Local, h + 1 + j, &[seg(Buf::Scratch, off, Buf::Output, off, len)], &into_root[j as usize]);
        let mut bcast_in: Vec<Option<u32>> = vec![None; p as usize];
        for i in t.top_down() {
            for c in t.children(i) {
                let (src_buf, deps): (Buf, Vec<u32>) = if i == 0 { (Buf::Scratch, into_root[j as usize].clone()) } else { (Buf::Output, bcast_in[i as usize].into_iter().collect()) };
                let id = b.transfer(i, c, Op::Copy, ctx.tier(i, c), h + 1 + t.depth[i as usize] + j, &[seg(src_buf, off, Buf::Output, off, len)], &deps);
                bcast_in[c as usize] = Some(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn tree_shape() {
        let t = Tree::new(6);
        assert_eq!(t.height, vec![2, 1, 1, 0, 0, 0]);
        assert_eq!(t.depth, vec![0, 1, 1, 2, 2, 2]);
        assert_eq!(t.subtree(1), vec![1, 3, 4]);
        assert_eq!(t.bottom_up, vec![3, 4, 5, 1, 2]);
        assert_eq!(runs([0u32, 1, 2, 5, 6, 9].into_iter()), vec![(0, 3), (5, 2), (9, 1)]);
    }
}
