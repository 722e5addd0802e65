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
use super::balance::{self, Block, Piece};
use super::{dedup_deps, push_seg};
use crate::error::Result;
use crate::plan::{Buf, Collective, Op, Plan, PlanBuilder, Segment};
use crate::topology::{Cluster, Tier};
use crate::traffic::Traffic;

/// Where a gathered piece sits before scale-out.
#[derive(Clone, Copy)]
struct Held {
    piece: Piece,
    /// Offset in the proxy's Scratch (gather region), or None when the proxy is the source.
    scratch_off: Option<u64>,
    gather_tid: Option<u32>,
}

/// A piece received by a non-final GPU, waiting for intra-node distribution.
#[derive(Clone, Copy)]
struct Inbound {
    scratch_off: u64,
    out_off: u64,
    len: u64,
    tid: u32,
}

pub(super) fn plan(traffic: &Traffic, cluster: &Cluster, alpha_permille: u64, name: &str) -> Result<Plan> {
    let n = traffic.n();
    let g = cluster.gpus_per_server as usize;
    let nodes = cluster.servers as usize;
    let nics = cluster.nics_per_server;
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let rank = |node: usize, local: usize| node * g + local;
    let mut b = PlanBuilder::new(name, Collective::AllToAll { traffic: traffic.clone() }, cluster.gpus_per_server);

    // Algorithm 1 for every (source node, destination node ≠ source) pair:
    // held[u][w][p] = pieces proxy p of node u carries to node w.
    let mut held: Vec<Vec<Vec<Vec<Held>>>> = Vec::with_capacity(nodes);
    let mut blocks: Vec<Block> = Vec::with_capacity(g * g);
    for u in 0..nodes {
        let mut per_w = Vec::with_capacity(nodes);
        for w in 0..nodes {
            if w == u {
                per_w.push(vec![Vec::new(); g]);
                continue;
            }
            blocks.clear();
            for s in 0..g {
                for d in 0..g {
                    let len = traffic.get(rank(u, s), rank(w, d));
                    if len > 0 {
                        blocks.push(Block { src_local: s as u32, dst_local: d as u32, len });
                    }
                }
            }
            let a = balance::assign(&blocks, cluster.gpus_per_server, nics, alpha_permille);
            per_w.push(a.into_iter().map(|v| v.into_iter().map(|piece| Held { piece, scratch_off: None, gather_tid: None }).collect()).collect());
        }
        held.push(per_w);
    }

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
        for s in 0..g {
            for p in 0..g {
                if p == s {
                    continue;
                }
                segs.clear();
                let dst_rank = rank(u, p);
                let tid = b.num_transfers() as u32;
                let mut any = false;
                for w in 0..nodes {
                    for h in held[u][w][p].iter_mut() {
                        if h.piece.src_local as usize != s {
                            continue;
                        }
                        let d = h.piece.dst_local as usize;
                        let off = scratch_used[dst_rank];
                        scratch_used[dst_rank] += h.piece.len;
                        h.scratch_off = Some(off);
                        h.gather_tid = Some(tid);
                        any = true;
                        let src_off = send[rank(u, s) * n + rank(w, d)] + h.piece.offset;
                        push_seg(&mut segs, Segment { src_buf: Buf::Input, src_off, dst_buf: Buf::Scratch, dst_off: off, len: h.piece.len });
                    }
                }
                if any {
                    b.transfer(rank(u, s) as u32, dst_rank as u32, Op::Copy, Tier::ScaleUp, 0, &segs, &[]);
                    gather_tid[rank(u, s) * g + p] = tid;
                }
            }
        }
    }

    // Step 1: intra-node blocks, after the gather on the same pair (gather traffic first).
    for u in 0..nodes {
        for s in 0..g {
            for d in 0..g {
                let (i, j) = (rank(u, s), rank(u, d));
                let len = traffic.get(i, j);
                if s == d || len == 0 {
                    continue;
                }
                deps.clear();
                if gather_tid[i * g + d] != u32::MAX {
                    deps.push(gather_tid[i * g + d]);
                }
                let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + j], dst_buf: Buf::Output, dst_off: recv[i * n + j], len };
                b.transfer(i as u32, j as u32, Op::Copy, Tier::ScaleUp, 1, &[seg], &deps);
            }
        }
    }

    // Step 1: scale-out, proxy p of u → GPU p of w. Inbound regions follow the gather regions.
    let gather_end = scratch_used.clone();
    let mut inbound: Vec<Vec<Inbound>> = vec![Vec::new(); n * g]; // [holder rank * g + final local]
    for u in 0..nodes {
        for p in 0..g {
            for w in 0..nodes {
                if w == u || held[u][w][p].is_empty() {
                    continue;
                }
                let (src, dst) = (rank(u, p), rank(w, p));
                let tid = b.num_transfers() as u32;
                segs.clear();
                deps.clear();
                for h in &held[u][w][p] {
                    let (s, d) = (h.piece.src_local as usize, h.piece.dst_local as usize);
                    let (i, j) = (rank(u, s), rank(w, d));
                    let (src_buf, src_off) = match h.scratch_off {
                        Some(off) => (Buf::Scratch, off),
                        None => (Buf::Input, send[i * n + j] + h.piece.offset),
                    };
                    if let Some(t) = h.gather_tid {
                        deps.push(t);
                    }
                    let out_off = recv[i * n + j] + h.piece.offset;
                    if d == p {
                        push_seg(&mut segs, Segment { src_buf, src_off, dst_buf: Buf::Output, dst_off: out_off, len: h.piece.len });
                    } else {
                        let off = scratch_used[dst];
                        scratch_used[dst] += h.piece.len;
                        push_seg(&mut segs, Segment { src_buf, src_off, dst_buf: Buf::Scratch, dst_off: off, len: h.piece.len });
                        inbound[dst * g + d].push(Inbound { scratch_off: off, out_off, len: h.piece.len, tid });
                    }
                }
                dedup_deps(&mut deps);
                b.transfer(src as u32, dst as u32, Op::Copy, Tier::ScaleOut, 1, &segs, &deps);
            }
        }
    }
    debug_assert!(gather_end.iter().zip(&scratch_used).all(|(a, b)| a <= b));

    // Step 2: intra-node distribution to the final GPU's Output.
    for holder in 0..n {
        let node = holder / g;
        for d in 0..g {
            let list = &inbound[holder * g + d];
            if list.is_empty() {
                continue;
            }
            segs.clear();
            deps.clear();
            for x in list {
                push_seg(&mut segs, Segment { src_buf: Buf::Scratch, src_off: x.scratch_off, dst_buf: Buf::Output, dst_off: x.out_off, len: x.len });
                deps.push(x.tid);
            }
            dedup_deps(&mut deps);
            b.transfer(holder as u32, rank(node, d) as u32, Op::Copy, Tier::ScaleUp, 2, &segs, &deps);
        }
    }

    for (r, &bytes) in scratch_used.iter().enumerate() {
        b.need_scratch(r as u32, bytes);
    }
    b.set_meta("alpha_permille", alpha_permille);
    b.set_meta("phases", 3);
    Ok(b.finish())
}
