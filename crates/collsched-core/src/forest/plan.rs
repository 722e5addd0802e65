//! Plans from a ForestSchedule (ForestColl §5.7): allgather along the out-trees,
//! reduce-scatter along the reversed (in-)trees, allreduce as reduce-scatter then allgather.
//!
//! Each root's data is split over its trees in proportion to multiplicity (every tree has
//! the same bandwidth y) and each tree's part into `chunks` pipeline chunks. Allgather:
//! chunk c crosses the edge into depth d in step c + d and waits for the parent's copy of
//! the same chunk; data lands directly in Output at the root's offset and is forwarded from
//! there. Reduce-scatter: a node with children first copies its own contribution into
//! scratch (step 0), children add theirs (ReduceSum), and the partial sum goes up in step
//! 1 + c + height. Ranks are compute nodes in graph order.
use super::ratio::Ratio;
use super::schedule::{ForestSchedule, ForestTree};
use crate::error::Result;
use crate::invalid;
use crate::plan::hash::Fnv64;
use crate::plan::{Buf, Collective, Op, Plan, PlanBuilder, Segment};
use crate::topology::Tier;

/// Knobs of plan generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// Pipeline chunks per tree part.
    pub chunks: u32,
    /// Merge a step's transfers between the same two ranks into one multi-segment message
    /// (3-19x fewer messages on the testbeds; in the fluid simulator within a few % at 1 GiB).
    pub merge: bool,
    /// Send a tree of multiplicity m as m unit streams (each its own chain of pieces per
    /// edge) instead of one stream carrying m shares. A stream gets one fair share of a
    /// link, so an unsplit tree of multiplicity 2 gets half its bandwidth where it meets
    /// unit trees; split, every stream wants the same rate y, as the packing assumes.
    pub split_multiplicity: bool,
}

impl PlanOptions {
    pub fn new(chunks: u32) -> PlanOptions {
        PlanOptions { chunks, merge: true, split_multiplicity: false }
    }
}

/// Pipeline chunks `predicted_time` assumes.
pub const DEFAULT_CHUNKS: u32 = 8;

/// Most chunks `auto_chunks` picks (each is one more message per tree edge).
pub const MAX_AUTO_CHUNKS: u32 = 64;

/// Per-piece latency `auto_chunks` assumes when the topology carries none: a scale-out
/// message (the cluster presets' alpha_scaleout), or a scale-up one inside one box.
pub const DEFAULT_PIECE_LATENCY_NS: u64 = 6_000;
pub const DEFAULT_PIECE_LATENCY_ONE_BOX_NS: u64 = 3_000;

/// Pipeline chunks per tree part for a run of `output_bytes` per rank (the allgather output,
/// the reduce-scatter input, the allreduce buffer: each phase moves that much) when every
/// piece pays `latency_ns` on top of its bytes. More pieces shorten the pipeline's fill and
/// drain (≈ T/P for T = output_bytes / algbw) but pay one latency each, so the time
/// ≈ T·(1 + 1/P) + P·latency is least at P = √(T / latency): ⌊√(T / latency)⌋ clamped to
/// 1..=MAX_AUTO_CHUNKS. Integer-only: the choice shapes the plan. Simulated on h100:2 and
/// a100:2 (docs/forestcoll.md) it is within a few % of the best power of two from 1 MiB to
/// 1 GiB, where the fixed 8 lost up to 3× at 1 MiB.
pub fn auto_chunks(s: &ForestSchedule, output_bytes: u64, latency_ns: u64) -> u32 {
    // T in ns = output_bytes · 10⁹ · den / num; a product past u128 is a huge run: most chunks.
    let t_ns = (output_bytes as u128)
        .checked_mul(1_000_000_000)
        .and_then(|x| x.checked_mul(s.algbw.den))
        .map(|x| x / s.algbw.num.max(1));
    let Some(t_ns) = t_ns else { return MAX_AUTO_CHUNKS };
    let ratio = t_ns / latency_ns.max(1) as u128;
    (ratio.isqrt().min(MAX_AUTO_CHUNKS as u128) as u32).max(1)
}

/// `auto_chunks` with the default latency for the schedule's graph (one box or several).
pub fn auto_chunks_default(s: &ForestSchedule, output_bytes: u64) -> u32 {
    auto_chunks(s, output_bytes, default_piece_latency_ns(s))
}

/// `DEFAULT_PIECE_LATENCY_ONE_BOX_NS` when every rank sits in one box, else the scale-out one.
pub fn default_piece_latency_ns(s: &ForestSchedule) -> u64 {
    let nodes = &s.graph.nodes;
    let first = s.ranks.first().map(|&r| nodes[r as usize].box_id);
    let one_box = first.is_some_and(|b| b.is_some() && s.ranks.iter().all(|&r| nodes[r as usize].box_id == b));
    if one_box {
        DEFAULT_PIECE_LATENCY_ONE_BOX_NS
    } else {
        DEFAULT_PIECE_LATENCY_NS
    }
}

/// Split `total` units into parts proportional to `weights` (largest-remainder free:
/// floors first, the remainder one unit at a time to the first parts; deterministic).
fn apportion(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u128 = weights.iter().map(|&w| w as u128).sum();
    let mut parts: Vec<u64> = weights.iter().map(|&w| (total as u128 * w as u128 / sum) as u64).collect();
    let mut rest = total - parts.iter().sum::<u64>();
    let mut i = 0;
    let np = parts.len();
    while rest > 0 {
        parts[i % np] += 1;
        rest -= 1;
        i += 1;
    }
    parts
}

/// (offset, len) of each of `chunks` near-equal pieces of `len` units.
fn chunk_ranges(offset: u64, len: u64, chunks: u32) -> Vec<(u64, u64)> {
    let parts = apportion(len, &vec![1; chunks as usize]);
    let mut off = offset;
    parts
        .into_iter()
        .map(|p| {
            let r = (off, p);
            off += p;
            r
        })
        .collect()
}

/// One tree's slice of a root's data: (tree index, offset, len) in units of elements; with
/// `split`, a tree of multiplicity m has m slices of one share each (m streams).
fn tree_parts(s: &ForestSchedule, root: u32, total: u64, split: bool) -> Vec<(usize, u64, u64)> {
    let trees = (0..s.trees.len()).filter(|&i| s.trees[i].root == root);
    let idx: Vec<usize> = if split { trees.flat_map(|i| std::iter::repeat_n(i, s.trees[i].multiplicity as usize)).collect() } else { trees.collect() };
    let w: Vec<u64> = idx.iter().map(|&i| if split { 1 } else { s.trees[i].multiplicity }).collect();
    let mut off = 0;
    idx.iter()
        .zip(apportion(total, &w))
        .map(|(&i, len)| {
            let r = (i, off, len);
            off += len;
            r
        })
        .collect()
}

/// A transfer before ids are final: (step, src, dst, op, tier, segment, deps as pending indices).
type Pending = (u32, u32, u32, Op, Tier, Segment, Vec<usize>);

struct Emitter<'a> {
    s: &'a ForestSchedule,
    pending: Vec<Pending>,
    tiers_agree: bool,
    gpus: u32,
}

impl<'a> Emitter<'a> {
    fn new(s: &'a ForestSchedule) -> Emitter<'a> {
        Emitter { s, pending: Vec::new(), tiers_agree: true, gpus: s.graph.gpus_per_box() }
    }
    /// Tier of a route: scale-out once it leaves the sender's box (a NIC-to-network hop or a
    /// node of another box), else scale-up.
    fn tier_of(&mut self, src: u32, dst: u32, path: &[u32]) -> Tier {
        let nodes = &self.s.graph.nodes;
        let home = nodes[path[0] as usize].box_id;
        let t = if home.is_some() && path.iter().all(|&v| nodes[v as usize].box_id == home) { Tier::ScaleUp } else { Tier::ScaleOut };
        if let (Some(a), Some(b)) = (src.checked_div(self.gpus), dst.checked_div(self.gpus)) {
            let by_server = if a == b { Tier::ScaleUp } else { Tier::ScaleOut };
            if by_server != t {
                self.tiers_agree = false;
            }
        }
        t
    }
    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, step: u32, src: u32, dst: u32, op: Op, tier: Tier, seg: Segment, deps: Vec<usize>) -> usize {
        self.pending.push((step, src, dst, op, tier, seg, deps));
        self.pending.len() - 1
    }
    fn local(&mut self, rank: u32, src_buf: Buf, src_off: u64, dst_buf: Buf, dst_off: u64, len: u64) -> usize {
        self.push(0, rank, rank, Op::Copy, Tier::Local, Segment { src_buf, src_off, dst_buf, dst_off, len }, Vec::new())
    }

    /// Broadcast `[base+off, +len)` of every root along its out-trees. `src_of_root` says where
    /// the root reads its data (Input at offset, or Output); `ready[tree][chunk]` are transfers
    /// the root's first sends must wait for (allreduce: the reduction into the root).
    #[allow(clippy::too_many_arguments)]
    fn broadcast(&mut self, tree: &ForestTree, chunks: &[(u64, u64)], root_buf: Buf, root_off: i128, dst_base: u64, step0: &[u32], ready: &[Vec<usize>]) {
        let depth = self.s.depths(tree);
        // The previous chunk's transfer on each tree edge: chunks of one edge form a stream
        // (chunk c waits for chunk c-1), so an edge carries one chunk at a time and a link's
        // fair share goes to streams, as the trees' rates assume, not to whoever queued most.
        let mut prev_on_edge: Vec<Option<usize>> = vec![None; tree.edges.len()];
        for (c, &(off, len)) in chunks.iter().enumerate() {
            if len == 0 {
                continue;
            }
            let mut delivered: Vec<Option<usize>> = vec![None; self.s.ranks.len()];
            for (ei, e) in tree.edges.iter().enumerate() {
                let (src_buf, src_off, mut deps) = if e.src == tree.root {
                    ((root_buf), (off as i128 + root_off) as u64, ready[c].clone())
                } else {
                    (Buf::Output, dst_base + off, vec![delivered[e.src as usize].expect("parent first")])
                };
                deps.extend(prev_on_edge[ei]);
                let tier = self.tier_of(e.src, e.dst, &e.path);
                let mut step = step0[c] + c as u32 + depth[e.dst as usize];
                for &d in &deps {
                    step = step.max(self.pending[d].0 + 1);
                }
                let seg = Segment { src_buf, src_off, dst_buf: Buf::Output, dst_off: dst_base + off, len };
                let id = self.push(step, e.src, e.dst, Op::Copy, tier, seg, deps);
                delivered[e.dst as usize] = Some(id);
                prev_on_edge[ei] = Some(id);
            }
        }
    }

    /// Reduce `[in_base+off, +len)` of every rank's Input into the root's Output at
    /// `out_base+off` along the reversed tree. A node with children accumulates in a buffer
    /// (the root: its Output; others: scratch) initialised with its own contribution; each
    /// child's partial sum is copied into a slot of its own and added locally, one addition
    /// after another (concurrent reductions into one buffer would race). Returns, per chunk,
    /// the transfer that completes the root's sum. `scratch` is each rank's next free offset.
    fn reduce(&mut self, tree: &ForestTree, chunks: &[(u64, u64)], in_base: u64, out_base: u64, scratch: &mut [u64], part_len: u64) -> Vec<Vec<usize>> {
        let n = self.s.ranks.len();
        let root = tree.root as usize;
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, e) in tree.edges.iter().enumerate() {
            children[e.src as usize].push(i);
        }
        // Scratch: an accumulator for internal non-root nodes, a slot per child for every parent.
        let mut acc = vec![u64::MAX; n];
        let mut slot = vec![u64::MAX; tree.edges.len()];
        for v in 0..n {
            if !children[v].is_empty() {
                if v != root {
                    acc[v] = scratch[v];
                    scratch[v] += part_len;
                }
                for &i in &children[v] {
                    slot[i] = scratch[v];
                    scratch[v] += part_len;
                }
            }
        }
        let first_off = chunks.first().map(|c| c.0).unwrap_or(0);
        let mut done = Vec::new();
        let mut prev_send: Vec<Option<usize>> = vec![None; tree.edges.len()];
        for (c, &(off, len)) in chunks.iter().enumerate() {
            if len == 0 {
                done.push(Vec::new());
                continue;
            }
            let rel = off - first_off;
            let acc_at = |v: usize| if v == root { (Buf::Output, out_base + off) } else { (Buf::Scratch, acc[v] + rel) };
            // last[v]: the transfer that completes v's partial sum (None for leaves: Input is ready).
            let mut last: Vec<Option<usize>> = vec![None; n];
            for v in 0..n {
                if !children[v].is_empty() {
                    let (b, o) = acc_at(v);
                    last[v] = Some(self.push(c as u32, v as u32, v as u32, Op::Copy, Tier::Local, Segment { src_buf: Buf::Input, src_off: in_base + off, dst_buf: b, dst_off: o, len }, Vec::new()));
                }
            }
            // Children before parents: reverse insertion order of a parent-before-child edge list.
            for i in (0..tree.edges.len()).rev() {
                let e = &tree.edges[i];
                let (q, p) = (e.dst as usize, e.src as usize);
                let (src_buf, src_off) = if children[q].is_empty() { (Buf::Input, in_base + off) } else { acc_at(q) };
                let mut rpath = e.path.clone();
                rpath.reverse();
                let tier = self.tier_of(e.dst, e.src, &rpath);
                let ready = last[q];
                let mut send_step = ready.map_or(c as u32, |t| self.pending[t].0) + 1;
                let mut deps: Vec<usize> = ready.into_iter().collect();
                if let Some(prev) = prev_send[i] {
                    send_step = send_step.max(self.pending[prev].0 + 1);
                    deps.push(prev);
                }
                let send = self.push(send_step, q as u32, p as u32, Op::Copy, tier, Segment { src_buf, src_off, dst_buf: Buf::Scratch, dst_off: slot[i] + rel, len }, deps);
                prev_send[i] = Some(send);
                let prev = last[p].expect("a parent has an accumulator");
                let (b, o) = acc_at(p);
                let step = send_step.max(self.pending[prev].0) + 1;
                let add = self.push(step, p as u32, p as u32, Op::ReduceSum, Tier::Local, Segment { src_buf: Buf::Scratch, src_off: slot[i] + rel, dst_buf: b, dst_off: o, len }, vec![send, prev]);
                last[p] = Some(add);
            }
            done.push(vec![last[root].expect("root has children")]);
        }
        done
    }

    /// Emit the transfers in step order. With `merge`, the network transfers of one step
    /// between the same pair of ranks (different trees or tree parts) become one message of
    /// several segments (Fusco-style descriptors): far fewer messages, same data movement.
    /// Every dependency points to an earlier step, so grouping within a step keeps the ids
    /// topologically ordered.
    fn finish(self, collective: Collective, chunks: u32, name: &str, o: &PlanOptions) -> Plan {
        let merge = o.merge;
        let p = &self.pending;
        let key = |i: usize| {
            let (step, src, dst, op, tier, ..) = p[i];
            // Local transfers stay alone (a merged local copy could read what it writes).
            (step, if merge && src != dst { (src, dst, op as u8, tier as u8, 0) } else { (0, 0, 0, 0, i + 1) })
        };
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by_key(|&i| (key(i), i));
        let mut group = vec![0u32; p.len()];
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (pos, &i) in order.iter().enumerate() {
            if pos == 0 || key(order[pos - 1]) != key(i) {
                groups.push(Vec::new());
            }
            group[i] = (groups.len() - 1) as u32;
            groups.last_mut().unwrap().push(i);
        }
        let gpus = if self.tiers_agree { self.gpus } else { 0 };
        let mut b = PlanBuilder::new("forest", collective, gpus);
        b.reserve(groups.len(), p.len());
        for (gid, members) in groups.iter().enumerate() {
            let (step, src, dst, op, tier, ..) = p[members[0]];
            let segs: Vec<Segment> = members.iter().map(|&i| p[i].5).collect();
            let mut deps: Vec<u32> = members.iter().flat_map(|&i| p[i].6.iter().map(|&d| group[d])).collect();
            deps.sort_unstable();
            deps.dedup();
            debug_assert!(deps.iter().all(|&d| (d as usize) < gid));
            b.transfer(src, dst, op, tier, step, &segs, &deps);
        }
        let s = self.s;
        b.set_meta("collective", name);
        b.set_meta("k", s.k);
        b.set_meta("trees", s.trees.len());
        b.set_meta("chunks", chunks);
        b.set_meta("merged", merge);
        if o.split_multiplicity {
            b.set_meta("split_multiplicity", true);
        }
        b.set_meta("max_depth", s.max_depth());
        b.set_meta("allgather_algbw_bytes_per_s", s.algbw);
        b.set_meta("optimal_allgather_algbw_bytes_per_s", s.optimum.algbw);
        b.set_meta("graph", &s.graph.name);
        if !self.tiers_agree {
            b.set_meta("tier_note", "some same-box routes leave the box (through a NIC); gpus_per_server set to 0");
        }
        let mut h = Fnv64::new();
        h.write(s.graph.to_json().as_bytes());
        h.write_u64(s.k);
        h.write_u64(chunks as u64);
        for t in &s.trees {
            h.write_u64(t.root as u64);
            h.write_u64(t.multiplicity);
            for e in &t.edges {
                h.write_u64(((e.src as u64) << 32) | e.dst as u64);
            }
        }
        h.write(name.as_bytes());
        if o.split_multiplicity {
            h.write(b"split");
        }
        b.set_input_hash(h.finish());
        b.finish()
    }
}

fn check_chunks(chunks: u32) -> Result<()> {
    if chunks == 0 || chunks > 4096 {
        return invalid!("chunks must be in 1..=4096, got {chunks}");
    }
    Ok(())
}

/// Allgather: every rank contributes `shard_bytes`; output is all shards in rank order.
pub fn plan_allgather(s: &ForestSchedule, shard_bytes: u64, chunks: u32) -> Result<Plan> {
    plan_allgather_with(s, shard_bytes, &PlanOptions::new(chunks))
}

pub fn plan_allgather_with(s: &ForestSchedule, shard_bytes: u64, o: &PlanOptions) -> Result<Plan> {
    let chunks = o.chunks;
    check_chunks(chunks)?;
    let n = s.num_ranks();
    let mut em = Emitter::new(s);
    for r in 0..n {
        em.local(r, Buf::Input, 0, Buf::Output, r as u64 * shard_bytes, shard_bytes);
    }
    for r in 0..n {
        for (ti, off, len) in tree_parts(s, r, shard_bytes, o.split_multiplicity) {
            let ch = chunk_ranges(off, len, chunks);
            let ready = vec![Vec::new(); ch.len()];
            em.broadcast(&s.trees[ti], &ch, Buf::Input, 0, r as u64 * shard_bytes, &vec![0; ch.len()], &ready);
        }
    }
    Ok(em.finish(Collective::AllGather { ranks: n, shard_bytes }, chunks, "allgather", o))
}

fn elems(bytes: u64, elem_bytes: u32, what: &str) -> Result<u64> {
    if elem_bytes == 0 {
        return invalid!("elem_bytes must be positive");
    }
    if !bytes.is_multiple_of(elem_bytes as u64) {
        return invalid!("{what} ({bytes} bytes) is not a multiple of elem_bytes ({elem_bytes})");
    }
    Ok(bytes / elem_bytes as u64)
}

fn scale(ch: Vec<(u64, u64)>, e: u64) -> Vec<(u64, u64)> {
    ch.into_iter().map(|(o, l)| (o * e, l * e)).collect()
}

/// Reduce-scatter: rank r's output is the element-wise sum of every rank's input shard r.
pub fn plan_reduce_scatter(s: &ForestSchedule, shard_bytes: u64, elem_bytes: u32, chunks: u32) -> Result<Plan> {
    plan_reduce_scatter_with(s, shard_bytes, elem_bytes, &PlanOptions::new(chunks))
}

pub fn plan_reduce_scatter_with(s: &ForestSchedule, shard_bytes: u64, elem_bytes: u32, o: &PlanOptions) -> Result<Plan> {
    let chunks = o.chunks;
    check_chunks(chunks)?;
    let n = s.num_ranks();
    let shard_elems = elems(shard_bytes, elem_bytes, "shard size")?;
    let e = elem_bytes as u64;
    let mut em = Emitter::new(s);
    let mut scratch = vec![0u64; n as usize];
    for r in 0..n {
        for (ti, off, len) in tree_parts(s, r, shard_elems, o.split_multiplicity) {
            let ch = scale(chunk_ranges(off, len, chunks), e);
            em.reduce(&s.trees[ti], &ch, r as u64 * shard_bytes, 0, &mut scratch, len * e);
        }
    }
    let mut plan = em.finish(Collective::ReduceScatter { ranks: n, shard_bytes, elem_bytes }, chunks, "reduce_scatter", o);
    plan.scratch_bytes = scratch;
    Ok(plan)
}

/// Allreduce as reduce-scatter along the in-trees then allgather along the out-trees, chunk
/// by chunk: a chunk's broadcast starts as soon as its reduction reaches the root.
pub fn plan_allreduce(s: &ForestSchedule, bytes: u64, elem_bytes: u32, chunks: u32) -> Result<Plan> {
    plan_allreduce_with(s, bytes, elem_bytes, &PlanOptions::new(chunks))
}

pub fn plan_allreduce_with(s: &ForestSchedule, bytes: u64, elem_bytes: u32, o: &PlanOptions) -> Result<Plan> {
    let chunks = o.chunks;
    check_chunks(chunks)?;
    let n = s.num_ranks();
    let total = elems(bytes, elem_bytes, "allreduce size")?;
    let e = elem_bytes as u64;
    let shards = apportion(total, &vec![1; n as usize]);
    let mut em = Emitter::new(s);
    let mut scratch = vec![0u64; n as usize];
    let mut base = 0u64;
    for r in 0..n {
        for (ti, off, len) in tree_parts(s, r, shards[r as usize], o.split_multiplicity) {
            let ch = scale(chunk_ranges(base + off, len, chunks), e);
            let ready = em.reduce(&s.trees[ti], &ch, 0, 0, &mut scratch, len * e);
            let step0: Vec<u32> = ready.iter().map(|ids| ids.iter().map(|&i| em.pending[i].0).max().unwrap_or(0)).collect();
            // Broadcast chunk c after its reduction: step0 + c + depth, with step0 already past c.
            let step0: Vec<u32> = step0.iter().enumerate().map(|(c, &st)| st.saturating_sub(c as u32)).collect();
            em.broadcast(&s.trees[ti], &ch, Buf::Output, 0, 0, &step0, &ready);
        }
        base += shards[r as usize];
    }
    let mut plan = em.finish(Collective::AllReduce { ranks: n, bytes, elem_bytes }, chunks, "allreduce", o);
    plan.scratch_bytes = scratch;
    Ok(plan)
}

/// Predicted allgather time (seconds) for `bytes` of output per rank: bytes/(N·x) for the
/// bandwidth term plus the pipeline fill, (depth − 1) more chunk hops of bytes/(N·x·chunks).
pub fn predicted_time(s: &ForestSchedule, bytes: u64) -> f64 {
    predicted_time_chunks(s, bytes, DEFAULT_CHUNKS)
}

pub fn predicted_time_chunks(s: &ForestSchedule, bytes: u64, chunks: u32) -> f64 {
    let shard_time = Ratio::int(bytes as u128).div(&s.algbw).to_f64();
    let depth = s.max_depth().max(1) as f64;
    shard_time * (1.0 + (depth - 1.0) / chunks.max(1) as f64)
}
