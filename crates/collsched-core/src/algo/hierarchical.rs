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
use crate::plan::rank_plan::RankPlan;
use crate::plan::{Buf, Collective, Op, Options, Plan, PlanBuilder, Segment, Transfer};
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
    let mut b = PlanBuilder::new("hierarchical", Collective::AllToAll { traffic: traffic.owned() }, cluster.gpus_per_server);
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


/// `rank`'s part of `plan`, expanded alone, in the whole plan's order: step 0 holds the
/// non-empty (source, aggregator index) messages in source order, step 1 the non-empty
/// (server, other server, index) messages in that order. The rank gathers for its own index
/// and sends those rail messages; it receives the rail messages of its index from every
/// other server, which depend only on gathers it takes no part in. Reads its server's rows
/// and its own column; with `count_pairs`, one counting pass over the matrix gives the
/// moving pairs.
pub fn plan_rank(traffic: &Traffic, cluster: &Cluster, rank: usize, digest: u64, count_pairs: bool) -> RankPlan {
    let n = traffic.n();
    let m = traffic.data();
    let servers = cluster.servers as usize;
    let g = cluster.gpus_per_server as usize;
    let (s, l) = (rank / g, rank % g);
    let at = |i: usize, j: usize| m[i * n + j];
    // From the server's rows (`server_messages`): which of its gathers and rail messages are
    // non-empty; this rank sends the rail messages of its index l. From the rank's column:
    // rail_in[t]: message (t, l) → (s, l) is non-empty.
    let (mut gather, mut rail) = (Vec::new(), Vec::new());
    server_messages(m, n, servers, g, s, &mut gather, &mut rail);
    let rail_out: Vec<bool> = (0..servers).map(|sp| rail[sp * g + l]).collect();
    let rail_in: Vec<bool> = (0..servers).map(|t| t != s && (0..g).any(|ls| at(t * g + ls, rank) > 0)).collect();
    // This rank's offsets: input offset of block (rank, j) is its row's prefix, output
    // offset of block (i, rank) its column's. The peer's side of a message is not this
    // rank's to know (`RankPlan::finish` clears it): 0 here.
    let prefix = |v: &mut dyn Iterator<Item = u64>| -> Vec<u64> {
        let mut acc = 0u64;
        v.map(|x| {
            acc += x;
            acc - x
        })
        .collect()
    };
    let row_prefix = prefix(&mut m[rank * n..(rank + 1) * n].iter().copied());
    let col_prefix = prefix(&mut (0..n).map(|i| at(i, rank)));
    let send_off = |i: usize, j: usize| -> u64 { if i == rank { row_prefix[j] } else { 0 } };
    let recv_off = |i: usize, j: usize| -> u64 { if j == rank { col_prefix[i] } else { 0 } };
    // Where aggregator (t, lp)'s scratch holds block (t, ls) → (sp, lp), and its scratch size.
    let scratch_of = |t: usize, lp: usize| -> (Vec<u64>, u64) {
        let mut off = vec![0u64; servers * g];
        let mut pos = 0u64;
        for sp in (0..servers).filter(|&x| x != t) {
            for ls in (0..g).filter(|&x| x != lp) {
                off[sp * g + ls] = pos;
                pos += at(t * g + ls, sp * g + lp);
            }
        }
        (off, pos)
    };
    // Ids: a local count in plan order.
    let mut next = 0u32;
    let mut take_id = || {
        next += 1;
        next - 1
    };
    let mut rp = RankPlan::empty("hierarchical", rank as u32, n as u32, cluster.gpus_per_server, digest);
    rp.input_bytes = traffic.row_sum(rank);
    rp.output_bytes = traffic.col_sum(rank);
    rp.moving_pairs = count_pairs.then(|| moving_pairs(m, n, servers, g));
    let (own_scratch, scratch_bytes) = scratch_of(s, l);
    rp.scratch_bytes = scratch_bytes;
    let transfer = |src: usize, dst: usize, tier: Tier, step: u32| Transfer { src: src as u32, dst: dst as u32, op: Op::Copy, tier, step, seg_begin: 0, seg_end: 0, dep_begin: 0, dep_end: 0 };
    // Step 0: gathers into this rank (as aggregator l) and its own gathers, by source.
    let mut segs = Vec::new();
    let mut my_gathers = vec![None; g];
    for ls in 0..g {
        let src = s * g + ls;
        for lp in 0..g {
            if !(ls == l || lp == l) || !gather[ls * g + lp] {
                continue;
            }
            let agg = s * g + lp;
            segs.clear();
            segs.push(Segment { src_buf: Buf::Input, src_off: send_off(src, agg), dst_buf: Buf::Output, dst_off: recv_off(src, agg), len: at(src, agg) });
            if ls != lp {
                for sp in (0..servers).filter(|&x| x != s) {
                    let dst = sp * g + lp;
                    let dst_off = if lp == l { own_scratch[sp * g + ls] } else { 0 };
                    segs.push(Segment { src_buf: Buf::Input, src_off: send_off(src, dst), dst_buf: Buf::Scratch, dst_off, len: at(src, dst) });
                }
            }
            let id = take_id();
            if lp == l {
                my_gathers[ls] = Some(id);
            }
            let tier = if ls == lp { Tier::Local } else { Tier::ScaleUp };
            rp.push(id, &transfer(src, agg, tier, 0), &segs, &[]);
        }
    }
    // Step 1, by sending server: this rank's rail messages when it sends, else the one it
    // receives from that server's aggregator of index l.
    let mut deps = Vec::new();
    for t in 0..servers {
        if t == s {
            for sp in (0..servers).filter(|&x| x != s) {
                if !rail_out[sp] {
                    continue;
                }
                let dst = sp * g + l;
                segs.clear();
                deps.clear();
                for ls in 0..g {
                    let src = s * g + ls;
                    let len = at(src, dst);
                    if len == 0 {
                        continue;
                    }
                    let (src_buf, src_off) = if ls == l {
                        (Buf::Input, send_off(src, dst))
                    } else {
                        deps.push(my_gathers[ls].expect("a non-empty piece was gathered"));
                        (Buf::Scratch, own_scratch[sp * g + ls])
                    };
                    segs.push(Segment { src_buf, src_off, dst_buf: Buf::Output, dst_off: recv_off(src, dst), len });
                }
                rp.push(take_id(), &transfer(rank, dst, Tier::ScaleOut, 1), &segs, &deps);
            }
        } else if rail_in[t] {
            let agg = t * g + l;
            segs.clear();
            for ls in 0..g {
                let src = t * g + ls;
                let len = at(src, rank);
                if len == 0 {
                    continue;
                }
                segs.push(Segment { src_buf: Buf::Input, src_off: 0, dst_buf: Buf::Output, dst_off: recv_off(src, rank), len });
            }
            rp.push(take_id(), &transfer(agg, rank, Tier::ScaleOut, 1), &segs, &[]);
        }
    }
    rp.finish();
    rp
}

/// Which of server `s`'s messages are non-empty, from its rows: `gather[ls * g + lp]`, message
/// (s, ls) → (s, lp) of step 0 (a block to another server travels via the aggregator of its
/// destination's index, a block inside the server to its destination); `rail[sp * g + lp]`,
/// message (s, lp) → (sp, lp) of step 1. Both are cleared and sized here.
fn server_messages(m: &[u64], n: usize, servers: usize, g: usize, s: usize, gather: &mut Vec<bool>, rail: &mut Vec<bool>) {
    gather.clear();
    gather.resize(g * g, false);
    rail.clear();
    rail.resize(servers * g, false);
    for ls in 0..g {
        let src = s * g + ls;
        for (j, &v) in m[src * n..(src + 1) * n].iter().enumerate() {
            if v == 0 {
                continue;
            }
            let (sp, lp) = (j / g, j % g);
            if sp == s || lp != ls {
                gather[ls * g + lp] = true;
            }
            if sp != s {
                rail[sp * g + lp] = true;
            }
        }
    }
}

/// The whole plan's `(step, distinct moving pairs)`: step 0's gathers between two ranks,
/// step 1's rail messages (one counting pass over the matrix).
fn moving_pairs(m: &[u64], n: usize, servers: usize, g: usize) -> Vec<(u32, u32)> {
    let (mut gather, mut rail) = (Vec::new(), Vec::new());
    let (mut step0, mut step1) = (0u32, 0u32);
    for s in 0..servers {
        server_messages(m, n, servers, g, s, &mut gather, &mut rail);
        step0 += (0..g * g).filter(|&k| gather[k] && k / g != k % g).count() as u32;
        step1 += rail.iter().filter(|&&f| f).count() as u32;
    }
    [(0, step0), (1, step1)].into_iter().filter(|&(_, k)| k > 0).collect()
}
