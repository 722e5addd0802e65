//! SABRE's lightly-skewed two-phase 2D all-to-all (§6.2).
//!
//! A GPU's inter-node communication group is its local index mod m (the NIC it uses).
//! Its send buffer holds three kinds of data:
//!   (1) blocks for GPUs on its own node,
//!   (2) blocks for remote GPUs of its own group: exchanged directly,
//!   (3) blocks for remote GPUs of other groups: forwarded to the local proxy with the
//!       destination's local index (same group as the destination), which sends them on.
//!
//! Phase 1 (step 0): direct exchange of (2) over the NICs while (3) is forwarded to the
//!   proxies over scale-up — one message per (source, proxy) pair, all nodes batched.
//! Phase 2 (step 1): each proxy sends one batched message per remote node to the GPU
//!   with its own local index (rail-aligned, straight into the Output), while the
//!   intra-node exchange (1) runs on the scale-up fabric. The intra-node block of a pair
//!   waits for that pair's forwarding message so forwarding gets the links first.
//! Dependencies are per message, so a proxy starts forwarding to the network as soon as
//! its own inputs have arrived: the two phases overlap.
use super::{dedup_deps, intra_node_direct, push_seg};
use crate::error::Result;
use crate::plan::{Buf, Collective, Op, Plan, PlanBuilder, Segment};
use crate::topology::{Cluster, Tier};
use crate::traffic::Traffic;

/// The two phases into `b` (a whole plan's or one rank's builder). No decisions beyond the
/// matrix: the digest records a constant.
pub(super) fn plan_into(traffic: &Traffic, cluster: &Cluster, mut b: PlanBuilder) -> Result<PlanBuilder> {
    let n = traffic.n();
    let g = cluster.gpus_per_server as usize;
    let nodes = cluster.servers as usize;
    let m = cluster.nics_per_server as usize;
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let rank = |node: usize, local: usize| node * g + local;
    // Upper bounds, so the plan's arrays come from the recycled pool (or are allocated once)
    // instead of growing: a self, direct or intra-node message per block; a forwarding
    // message per (source, proxy) and a batch per (proxy, node), each at most one per
    // block too. A forwarded block is a segment twice; a phase-2 or intra-node message has
    // a dep per block.
    let blocks = traffic.nonzero_blocks();
    b.reserve(blocks + (n * g).min(blocks) + (n * nodes).min(blocks), 2 * blocks);
    b.reserve_deps(2 * blocks);
    let mut segs: Vec<Segment> = Vec::new();
    let mut deps: Vec<u32> = Vec::new();
    let mut scratch_used = vec![0u64; n];

    // Self copies.
    for i in 0..n {
        let len = traffic.get(i, i);
        if len > 0 {
            let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + i], dst_buf: Buf::Output, dst_off: recv[i * n + i], len };
            b.transfer(i as u32, i as u32, Op::Copy, Tier::Local, 0, &[seg], &[]);
        }
    }

    // Phase 1a: direct exchange inside each communication group.
    for i in 0..n {
        let (u, s) = (i / g, i % g);
        for j in 0..n {
            let (w, d) = (j / g, j % g);
            let len = traffic.get(i, j);
            if w == u || s % m != d % m || len == 0 {
                continue;
            }
            let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + j], dst_buf: Buf::Output, dst_off: recv[i * n + j], len };
            b.transfer(i as u32, j as u32, Op::Copy, Tier::ScaleOut, 0, &[seg], &[]);
        }
    }

    // Phase 1b: forward (3) to proxy (u, d); remember where each block sits.
    // fwd_off[i * n + j] = offset of block i→j in its proxy's Scratch; fwd_tid[i * g + d] = message id.
    let mut fwd_off = vec![u64::MAX; n * n];
    let mut fwd_tid = vec![u32::MAX; n * g];
    for u in 0..nodes {
        for s in 0..g {
            let i = rank(u, s);
            for d in 0..g {
                if s % m == d % m {
                    continue;
                }
                let p = rank(u, d);
                segs.clear();
                for w in 0..nodes {
                    let j = rank(w, d);
                    let len = traffic.get(i, j);
                    if w == u || len == 0 {
                        continue;
                    }
                    let off = scratch_used[p];
                    scratch_used[p] += len;
                    fwd_off[i * n + j] = off;
                    push_seg(&mut segs, Segment { src_buf: Buf::Input, src_off: send[i * n + j], dst_buf: Buf::Scratch, dst_off: off, len });
                }
                if !segs.is_empty() {
                    fwd_tid[i * g + d] = b.transfer(i as u32, p as u32, Op::Copy, Tier::ScaleUp, 0, &segs, &[]);
                }
            }
        }
    }

    // Phase 2a: proxy (u, d) → (w, d), one batched message per remote node.
    for u in 0..nodes {
        for d in 0..g {
            let p = rank(u, d);
            for w in 0..nodes {
                if w == u {
                    continue;
                }
                let j = rank(w, d);
                segs.clear();
                deps.clear();
                for s in 0..g {
                    let i = rank(u, s);
                    let len = traffic.get(i, j);
                    if s % m == d % m || len == 0 {
                        continue;
                    }
                    push_seg(&mut segs, Segment { src_buf: Buf::Scratch, src_off: fwd_off[i * n + j], dst_buf: Buf::Output, dst_off: recv[i * n + j], len });
                    deps.push(fwd_tid[i * g + d]);
                }
                if !segs.is_empty() {
                    dedup_deps(&mut deps);
                    b.transfer(p as u32, j as u32, Op::Copy, Tier::ScaleOut, 1, &segs, &deps);
                }
            }
        }
    }

    // Phase 2b: intra-node exchange (1), after the pair's forwarding message.
    intra_node_direct(&mut b, traffic, g, &send, &recv, &fwd_tid);

    for (r, &bytes) in scratch_used.iter().enumerate() {
        b.need_scratch(r as u32, bytes);
    }
    b.set_meta("phases", 2);
    b.set_decisions(1);
    Ok(b)
}

pub(super) fn plan(traffic: &Traffic, cluster: &Cluster, name: &str) -> Result<Plan> {
    let b = PlanBuilder::new(name, Collective::AllToAll { traffic: traffic.owned() }, cluster.gpus_per_server);
    Ok(plan_into(traffic, cluster, b)?.finish())
}
