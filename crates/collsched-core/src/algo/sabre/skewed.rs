//! SABRE's highly-skewed three-phase all-to-all (§5.3).
//!
//! Step 0: intra-node gather — each source GPU sends the pieces Algorithm 1 assigned
//!         to another proxy into that proxy's Scratch (gather region), one message
//!         per (source, proxy) pair. Self blocks are copied locally.
//! Step 1: batched scale-out — proxy g of node u sends one message to GPU g of node w
//!         (same local index, hence the same communication group g mod m) carrying
//!         every piece it holds for node w. Pieces whose final GPU is g go straight to
//!         the receiver's Output; the rest land in its Scratch (inbound region).
//!         Intra-node blocks also move in this step, after the gather on the same pair,
//!         while the scale-up fabric is otherwise idle.
//! Step 2: intra-node distribution — each GPU forwards inbound pieces to their final
//!         GPU's Output (final assembly at torch offsets).
//!
//! Sender and receiver derive the same layout from the shared matrix: it is one Plan.
use super::balance::{Balancer, Block, Piece};
use super::{dedup_deps, intra_node_direct, push_seg};
use crate::error::Result;
use crate::plan::{Buf, Collective, Op, Plan, PlanBuilder, Segment};
use crate::topology::{Cluster, Tier};
use crate::traffic::Traffic;

/// A piece of node u's traffic to node w, carried by proxy `proxy` of u.
#[derive(Clone, Copy)]
struct Held {
    piece: Piece,
    w: u32,
    proxy: u32,
    /// Offset in the proxy's Scratch (gather region); u64::MAX when the proxy is the source.
    scratch_off: u64,
    gather_tid: u32,
}

/// A piece received by a non-final GPU, waiting for intra-node distribution.
#[derive(Clone, Copy)]
struct Inbound {
    holder: u32,
    final_local: u32,
    scratch_off: u64,
    out_off: u64,
    len: u64,
    tid: u32,
}

/// Stable counting sort of `0..items` by `key(i) < buckets`: returns (order, bucket starts).
fn bucket_order(items: usize, buckets: usize, key: impl Fn(usize) -> usize) -> (Vec<u32>, Vec<usize>) {
    let mut start = vec![0usize; buckets + 1];
    for i in 0..items {
        start[key(i) + 1] += 1;
    }
    for k in 0..buckets {
        start[k + 1] += start[k];
    }
    let mut fill = start.clone();
    let mut order = vec![0u32; items];
    for i in 0..items {
        let k = key(i);
        order[fill[k]] = i as u32;
        fill[k] += 1;
    }
    (order, start)
}

/// Algorithm 1 for every (source node u, destination node w ≠ u), in (u, w) order:
/// `f(u, w, assignment)` with the (proxy, piece) pairs in assignment order.
fn for_each_assignment(traffic: &Traffic, cluster: &Cluster, alpha_permille: u64, mut f: impl FnMut(usize, usize, &[(u32, Piece)])) {
    let g = cluster.gpus_per_server as usize;
    let nodes = cluster.servers as usize;
    let mut balancer = Balancer::default();
    let mut blocks: Vec<Block> = Vec::with_capacity(g * g);
    for u in 0..nodes {
        for w in 0..nodes {
            if w == u {
                continue;
            }
            blocks.clear();
            for s in 0..g {
                for d in 0..g {
                    let len = traffic.get(u * g + s, w * g + d);
                    if len > 0 {
                        blocks.push(Block { src_local: s as u32, dst_local: d as u32, len });
                    }
                }
            }
            f(u, w, balancer.assign(&blocks, cluster.gpus_per_server, cluster.nics_per_server, alpha_permille));
        }
    }
}

/// Bytes each NIC sends and receives in the plan `plan` makes (scale-out step: proxy p of
/// node u → GPU p of node w), without emitting it: per global NIC, (up, down). Summed from
/// `scaleout_messages`, so the test that these equal the plan's loads checks the messages too.
pub fn nic_loads(traffic: &Traffic, cluster: &Cluster, alpha_permille: u64) -> (Vec<u64>, Vec<u64>) {
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (mut up, mut down) = (vec![0u64; nics], vec![0u64; nics]);
    for m in scaleout_messages(traffic, cluster, alpha_permille) {
        up[cluster.global_nic_of(m.src) as usize] += m.bytes;
        down[cluster.global_nic_of(m.dst) as usize] += m.bytes;
    }
    (up, down)
}

/// A scale-out message of the plan `plan` makes (proxy p of node u → GPU p of node w), with
/// the sizes of the messages it waits for and that wait for it, computed without emitting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleOutMessage {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    /// The largest gather message (source → proxy p) it depends on; 0 if it carries only
    /// the proxy's own pieces (then it has no dependency).
    pub gather_max: u64,
    /// The largest distribution message (GPU p of w → a final GPU) that depends on it; 0 if
    /// every piece it carries ends on GPU p (then nothing depends on it).
    pub distribution_max: u64,
}

/// The scale-out messages of the plan `plan` makes, in its order, from one run of Algorithm 1.
pub fn scaleout_messages(traffic: &Traffic, cluster: &Cluster, alpha_permille: u64) -> Vec<ScaleOutMessage> {
    let g = cluster.gpus_per_server as usize;
    let nodes = cluster.servers as usize;
    // Per piece: its message, source and final local index; per node: gather bytes
    // [u][s][p] and distribution bytes [w][p][d], summed over every node pair.
    let mut pieces: Vec<(u32, u32, u32)> = Vec::new();
    let mut messages: Vec<ScaleOutMessage> = Vec::new();
    // Per message: its (source node, destination node, proxy), kept to spare divisions.
    let mut ends: Vec<(u32, u32, u32)> = Vec::new();
    let mut gather = vec![0u64; nodes * g * g];
    let mut distribution = vec![0u64; nodes * g * g];
    let mut per_proxy = vec![u32::MAX; g];
    for_each_assignment(traffic, cluster, alpha_permille, |u, w, out| {
        per_proxy.fill(u32::MAX);
        for &(p, piece) in out {
            let (pu, s, d) = (p as usize, piece.src_local as usize, piece.dst_local as usize);
            if per_proxy[pu] == u32::MAX {
                per_proxy[pu] = messages.len() as u32;
                messages.push(ScaleOutMessage { src: (u * g + pu) as u32, dst: (w * g + pu) as u32, bytes: 0, gather_max: 0, distribution_max: 0 });
                ends.push((u as u32, w as u32, pu as u32));
            }
            messages[per_proxy[pu] as usize].bytes += piece.len;
            pieces.push((per_proxy[pu], piece.src_local, piece.dst_local));
            if s != pu {
                gather[(u * g + s) * g + pu] += piece.len;
            }
            if d != pu {
                distribution[(w * g + pu) * g + d] += piece.len;
            }
        }
    });
    for &(m, s, d) in &pieces {
        let msg = &mut messages[m as usize];
        let (u, w, p) = ends[m as usize];
        let (u, w, p) = (u as usize, w as usize, p as usize);
        if s as usize != p {
            msg.gather_max = msg.gather_max.max(gather[(u * g + s as usize) * g + p]);
        }
        if d as usize != p {
            msg.distribution_max = msg.distribution_max.max(distribution[(w * g + p) * g + d as usize]);
        }
    }
    messages
}

/// Algorithm 1's assignment, then the three phases into `b` (a whole plan's or one rank's
/// builder); the builder's decisions digest is that of the assignment.
pub(super) fn plan_into(traffic: &Traffic, cluster: &Cluster, alpha_permille: u64, mut b: PlanBuilder) -> Result<PlanBuilder> {
    let n = traffic.n();
    let g = cluster.gpus_per_server as usize;
    let nodes = cluster.servers as usize;
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let rank = |node: usize, local: usize| node * g + local;

    // Algorithm 1 for every (source node u, destination node w ≠ u). held[node_begin[u]..node_begin[u+1]]
    // are node u's pieces ordered by (w, proxy, assignment order).
    let mut held: Vec<Held> = Vec::with_capacity(n * g + nodes * nodes * g);
    let mut node_begin = vec![0usize; nodes + 1];
    for_each_assignment(traffic, cluster, alpha_permille, |u, w, out| {
        let (order, _) = bucket_order(out.len(), g, |i| out[i].0 as usize);
        held.extend(order.iter().map(|&i| {
            let (proxy, piece) = out[i as usize];
            Held { piece, w: w as u32, proxy, scratch_off: u64::MAX, gather_tid: u32::MAX }
        }));
        node_begin[u + 1] = held.len(); // every u meets each w ≠ u; one node: stays [0, 0]
    });

    // Upper bounds, so the plan's arrays come from the recycled pool (or are allocated
    // once) instead of growing: self copies, gather and intra-node messages (one per
    // ordered GPU pair of a node each), scale-out (one per held run) and distribution (one
    // per (holder, final GPU)); a held piece is a segment in at most three of them.
    let transfers = n + 3 * n * g.saturating_sub(1) + held.len();
    b.reserve(transfers, n + n * g + 3 * held.len());
    b.reserve_deps(n * g + 2 * held.len());
    let mut segs: Vec<Segment> = Vec::new();
    let mut deps: Vec<u32> = Vec::new();
    let mut scratch_used = vec![0u64; n];

    // Step 0: self copies.
    for i in 0..n {
        let len = traffic.get(i, i);
        if len > 0 {
            let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + i], dst_buf: Buf::Output, dst_off: recv[i * n + i], len };
            b.transfer(i as u32, i as u32, Op::Copy, Tier::Local, 0, &[seg], &[]);
        }
    }

    // Step 0: gather. One message per (source s, proxy p ≠ s) of each node, pieces in
    // (destination node, assignment order).
    let mut gather_tid = vec![u32::MAX; n * g]; // [rank(u,s) * g + p]
    for u in 0..nodes {
        let base = node_begin[u];
        let mine = &held[base..node_begin[u + 1]];
        let (order, start) = bucket_order(mine.len(), g * g, |i| mine[i].piece.src_local as usize * g + mine[i].proxy as usize);
        for s in 0..g {
            for p in 0..g {
                let bucket = &order[start[s * g + p]..start[s * g + p + 1]];
                if p == s || bucket.is_empty() {
                    continue;
                }
                let dst_rank = rank(u, p);
                let tid = b.num_transfers() as u32;
                segs.clear();
                for &k in bucket {
                    let h = &mut held[base + k as usize];
                    let off = scratch_used[dst_rank];
                    scratch_used[dst_rank] += h.piece.len;
                    h.scratch_off = off;
                    h.gather_tid = tid;
                    let src_off = send[rank(u, s) * n + rank(h.w as usize, h.piece.dst_local as usize)] + h.piece.offset;
                    push_seg(&mut segs, Segment { src_buf: Buf::Input, src_off, dst_buf: Buf::Scratch, dst_off: off, len: h.piece.len });
                }
                b.transfer(rank(u, s) as u32, dst_rank as u32, Op::Copy, Tier::ScaleUp, 0, &segs, &[]);
                gather_tid[rank(u, s) * g + p] = tid;
            }
        }
    }

    // Step 1: intra-node blocks, after the gather on the same pair (gather traffic first).
    intra_node_direct(&mut b, traffic, g, &send, &recv, &gather_tid);

    // Step 1: scale-out, proxy p of u → GPU p of w, one message per (u, w, p) run of `held`.
    // Inbound regions follow the gather regions in each receiver's Scratch.
    let mut inbound: Vec<Inbound> = Vec::new();
    let mut k = 0;
    while k < held.len() {
        let (w, p) = (held[k].w as usize, held[k].proxy as usize);
        let u = node_begin.partition_point(|&x| x <= k) - 1;
        let mut e = k;
        while e < held.len() && e < node_begin[u + 1] && held[e].w as usize == w && held[e].proxy as usize == p {
            e += 1;
        }
        let (src, dst) = (rank(u, p), rank(w, p));
        let tid = b.num_transfers() as u32;
        segs.clear();
        deps.clear();
        for h in &held[k..e] {
            let (s, d) = (h.piece.src_local as usize, h.piece.dst_local as usize);
            let (i, j) = (rank(u, s), rank(w, d));
            let (src_buf, src_off) = if h.scratch_off != u64::MAX { (Buf::Scratch, h.scratch_off) } else { (Buf::Input, send[i * n + j] + h.piece.offset) };
            if h.gather_tid != u32::MAX {
                deps.push(h.gather_tid);
            }
            let out_off = recv[i * n + j] + h.piece.offset;
            if d == p {
                push_seg(&mut segs, Segment { src_buf, src_off, dst_buf: Buf::Output, dst_off: out_off, len: h.piece.len });
            } else {
                let off = scratch_used[dst];
                scratch_used[dst] += h.piece.len;
                push_seg(&mut segs, Segment { src_buf, src_off, dst_buf: Buf::Scratch, dst_off: off, len: h.piece.len });
                inbound.push(Inbound { holder: dst as u32, final_local: d as u32, scratch_off: off, out_off, len: h.piece.len, tid });
            }
        }
        dedup_deps(&mut deps);
        b.transfer(src as u32, dst as u32, Op::Copy, Tier::ScaleOut, 1, &segs, &deps);
        k = e;
    }

    // Step 2: intra-node distribution to the final GPU's Output, one message per (holder, final GPU).
    let (order, start) = bucket_order(inbound.len(), n * g, |i| inbound[i].holder as usize * g + inbound[i].final_local as usize);
    for key in 0..n * g {
        let bucket = &order[start[key]..start[key + 1]];
        if bucket.is_empty() {
            continue;
        }
        let (holder, d) = (key / g, key % g);
        segs.clear();
        deps.clear();
        for &x in bucket {
            let x = &inbound[x as usize];
            push_seg(&mut segs, Segment { src_buf: Buf::Scratch, src_off: x.scratch_off, dst_buf: Buf::Output, dst_off: x.out_off, len: x.len });
            deps.push(x.tid);
        }
        dedup_deps(&mut deps);
        b.transfer(holder as u32, rank(holder / g, d) as u32, Op::Copy, Tier::ScaleUp, 2, &segs, &deps);
    }

    for (r, &bytes) in scratch_used.iter().enumerate() {
        b.need_scratch(r as u32, bytes);
    }
    b.set_meta("alpha_permille", alpha_permille);
    b.set_meta("phases", 3);
    // The decisions: which proxy carries which piece of which block, per node pair.
    let mut h = crate::plan::hash::Fnv64::new();
    let words: Vec<u64> = held.iter().flat_map(|x| [u64::from(x.w) << 32 | u64::from(x.proxy), u64::from(x.piece.src_local) << 32 | u64::from(x.piece.dst_local), x.piece.offset, x.piece.len]).collect();
    h.write_u64s(&words);
    b.set_decisions(h.finish().max(1));
    Ok(b)
}

pub(super) fn plan(traffic: &Traffic, cluster: &Cluster, alpha_permille: u64, name: &str) -> Result<Plan> {
    let b = PlanBuilder::new(name, Collective::AllToAll { traffic: traffic.owned() }, cluster.gpus_per_server);
    Ok(plan_into(traffic, cluster, alpha_permille, b)?.finish())
}
