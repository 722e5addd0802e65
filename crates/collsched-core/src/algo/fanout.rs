//! Fan-out: every pair at once, straight from input to output. What NCCL, RCCL
//! and torch's `all_to_all_single` do; it suffers incast on skewed traffic.
//!
//! No decisions: the matrix fixes everything. Transfer (i, j) exists when the block is not
//! empty, in row order, so one rank's part reads only its row and its column.
use crate::error::Result;
use crate::plan::rank_plan::RankPlan;
use crate::plan::{Buf, Collective, Op, Options, Plan, PlanBuilder, Segment, Transfer};
use crate::topology::Cluster;
use crate::traffic::Traffic;

/// Block i→j's transfer and its one segment, given its input offset at i and output offset at j.
#[inline]
fn block(cluster: &Cluster, i: usize, j: usize, len: u64, src_off: u64, dst_off: u64) -> (Transfer, Segment) {
    let seg = Segment { src_buf: Buf::Input, src_off, dst_buf: Buf::Output, dst_off, len };
    let t = Transfer { src: i as u32, dst: j as u32, op: Op::Copy, tier: cluster.tier(i as u32, j as u32), step: 0, seg_begin: 0, seg_end: 1, dep_begin: 0, dep_end: 0 };
    (t, seg)
}

/// The whole plan: every rank's sends, rank by rank.
pub fn plan(traffic: &Traffic, cluster: &Cluster, _opts: &Options) -> Result<Plan> {
    let n = traffic.n();
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let mut b = PlanBuilder::new("fanout", Collective::AllToAll { traffic: traffic.clone() }, cluster.gpus_per_server);
    b.reserve(n * n, n * n);
    for i in 0..n {
        for j in 0..n {
            let len = traffic.get(i, j);
            if len == 0 {
                continue;
            }
            let (t, seg) = block(cluster, i, j, len, send[i * n + j], recv[i * n + j]);
            b.transfer(t.src, t.dst, t.op, t.tier, t.step, &[seg], &[]);
        }
    }
    Ok(b.finish())
}

/// `rank`'s part of `plan`: its sends (one row) and receives (one column), O(P). With
/// `count_pairs`, also the moving pairs: one counting pass over the whole matrix.
pub fn plan_rank(traffic: &Traffic, cluster: &Cluster, rank: usize, digest: u64, count_pairs: bool) -> RankPlan {
    let n = traffic.n();
    let m = traffic.data();
    let mut rp = RankPlan::empty("fanout", rank as u32, n as u32, cluster.gpus_per_server, digest);
    rp.input_bytes = traffic.row_sum(rank);
    rp.output_bytes = traffic.col_sum(rank);
    if count_pairs {
        let moving = m.iter().filter(|&&v| v != 0).count() - (0..n).filter(|&i| m[i * n + i] != 0).count();
        rp.moving_pairs = Some(if moving > 0 { vec![(0, moving as u32)] } else { Vec::new() });
    }
    // The whole plan's order is row by row: receives from the rows above `rank`, its own row
    // (sends, the self copy among them), receives from the rows below; pushed in that order
    // (the row count is an ascending id). The peer's offsets are not this rank's to know
    // (`RankPlan::finish` clears them).
    let push = |rp: &mut RankPlan, i: usize, j: usize, len: u64, src_off: u64, dst_off: u64| {
        let (t, seg) = block(cluster, i, j, len, src_off, dst_off);
        let id = rp.transfers.len() as u32;
        rp.push(id, &t, &[seg], &[]);
    };
    let mut recv_off = 0u64; // output offset of block (i, rank): the column's prefix sum
    for i in 0..n {
        let len = m[i * n + rank];
        if i == rank {
            let mut send_off = 0u64;
            for (j, &out) in m[rank * n..(rank + 1) * n].iter().enumerate() {
                if out > 0 {
                    push(&mut rp, rank, j, out, send_off, if j == rank { recv_off } else { 0 });
                    send_off += out;
                }
            }
        } else if len > 0 {
            push(&mut rp, i, rank, len, 0, recv_off);
        }
        recv_off += len;
    }
    rp.finish();
    rp
}
