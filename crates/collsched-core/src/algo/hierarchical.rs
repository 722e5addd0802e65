//! Hierarchical (two-step) all-to-all, as in MSCCL's two-step, Tutel's 2DH and
//! NCCL's PXN: data from GPU (s,l) to GPU (s',l') on another server is first
//! gathered inside server s onto GPU (s,l'), the GPU with the destination's local
//! index (step 0, scale-up, into its scratch; data already there stays in its
//! Input); then one rail-aligned scale-out message per (s → s', local index l')
//! carries every source's piece straight into the Output of (s',l') (step 1).
//! Each rail's traffic thus leaves through NIC l' % nics of its own server, and a
//! server pair exchanges G messages instead of G².
//!
//! Same-server blocks go Input→Output directly in step 0, inside the same
//! scale-up message as the gathered pieces; self blocks are local copies.
use super::spreadout::reject_options;
use crate::error::Result;
use crate::plan::{Buf, Collective, Op, Options, Plan, PlanBuilder, Segment};
use crate::topology::{Cluster, Tier};
use crate::traffic::Traffic;

pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    reject_options("hierarchical", opts)?;
    let n = traffic.n();
    let servers = cluster.servers as usize;
    let g = cluster.gpus_per_server as usize;
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let rank = |s: usize, l: usize| s * g + l;
    let mut b = PlanBuilder::new("hierarchical", Collective::AllToAll { traffic: traffic.clone() }, cluster.gpus_per_server);
    // Upper bounds, so the plan's arrays come from the recycled pool (or are allocated once)
    // instead of growing: one gather message per ordered GPU pair of a server and at most
    // one scale-out message per (aggregator, other server) or per block; a block is a
    // segment at most twice and a scale-out message has at most one dep per block.
    let blocks = traffic.nonzero_blocks();
    b.reserve(n * g + (n * servers).min(blocks), n * g + 2 * blocks);
    b.reserve_deps(blocks);

    // Scratch of aggregator (s,l') holds, for each other server s' in order and each
    // other source index l in order, the block (s,l)→(s',l'). Index: [(agg*S + s')*G + l].
    let mut scratch_off = vec![0u64; n * servers * g];
    let mut max_scratch = 0u64;
    for agg in 0..n {
        let (s, lp) = (agg / g, agg % g);
        let mut at = 0u64;
        for sp in (0..servers).filter(|&x| x != s) {
            for l in (0..g).filter(|&x| x != lp) {
                scratch_off[(agg * servers + sp) * g + l] = at;
                at += traffic.get(rank(s, l), rank(sp, lp));
            }
        }
        b.need_scratch(agg as u32, at);
        max_scratch = max_scratch.max(at);
    }

    // Step 0: one message per ordered GPU pair inside each server.
    let mut gather_id: Vec<Option<u32>> = vec![None; n * g];
    for s in 0..servers {
        for l in 0..g {
            let src = rank(s, l);
            for lp in 0..g {
                let agg = rank(s, lp);
                let direct = traffic.get(src, agg);
                let mut segs = vec![Segment { src_buf: Buf::Input, src_off: send[src * n + agg], dst_buf: Buf::Output, dst_off: recv[src * n + agg], len: direct }];
                if l != lp {
                    for sp in (0..servers).filter(|&x| x != s) {
                        let dst = rank(sp, lp);
                        segs.push(Segment {
                            src_buf: Buf::Input,
                            src_off: send[src * n + dst],
                            dst_buf: Buf::Scratch,
                            dst_off: scratch_off[(agg * servers + sp) * g + l],
                            len: traffic.get(src, dst),
                        });
                    }
                }
                if segs.iter().any(|x| x.len > 0) {
                    let tier = if l == lp { Tier::Local } else { Tier::ScaleUp };
                    gather_id[src * g + lp] = Some(b.transfer(src as u32, agg as u32, Op::Copy, tier, 0, &segs, &[]));
                }
            }
        }
    }

    // Step 1: one rail-aligned message per (server s → server s', local index l').
    let mut messages = 0u64;
    for s in 0..servers {
        for sp in (0..servers).filter(|&x| x != s) {
            for lp in 0..g {
                let (agg, dst) = (rank(s, lp), rank(sp, lp));
                let mut segs = Vec::with_capacity(g);
                let mut deps = Vec::new();
                for l in 0..g {
                    let src = rank(s, l);
                    let len = traffic.get(src, dst);
                    if len == 0 {
                        continue;
                    }
                    let (src_buf, src_off) = if l == lp {
                        (Buf::Input, send[src * n + dst])
                    } else {
                        deps.push(gather_id[src * g + lp].expect("a non-empty piece was gathered"));
                        (Buf::Scratch, scratch_off[(agg * servers + sp) * g + l])
                    };
                    segs.push(Segment { src_buf, src_off, dst_buf: Buf::Output, dst_off: recv[src * n + dst], len });
                }
                if !segs.is_empty() {
                    b.transfer(agg as u32, dst as u32, Op::Copy, Tier::ScaleOut, 1, &segs, &deps);
                    messages += 1;
                }
            }
        }
    }
    b.set_meta("steps", 2);
    b.set_meta("scaleout_messages", messages);
    b.set_meta("scratch_bytes_max", max_scratch);
    Ok(b.finish())
}

