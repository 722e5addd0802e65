//! Fan-out: every pair at once, straight from input to output. What NCCL, RCCL
//! and torch's `all_to_all_single` do; it suffers incast on skewed traffic.
//!
//! No decisions: the matrix fixes everything. Transfer (i, j) exists when the block is not
//! empty, and ids run row by row, so (i, j)'s id is the non-empty blocks of the rows before
//! i plus those of row i before j: one rank finds every id it needs from per-row counts.
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
    let mut b = PlanBuilder::new("fanout", Collective::AllToAll { traffic: traffic.owned() }, cluster.gpus_per_server);
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

/// `rank`'s part of `plan`: its sends (one row) and receives (one column). The ids take one
/// counting pass over the matrix (non-empty blocks per row, split at column `rank`), which
/// also gives the moving pairs; everything else reads only the rank's row and column.
pub fn plan_rank(traffic: &Traffic, cluster: &Cluster, rank: usize, digest: u64) -> RankPlan {
    let n = traffic.n();
    let m = traffic.data();
    // first[i]: id of row i's first transfer; before[i]: row i's non-empty blocks left of
    // `rank`, left_sum[i] their bytes (block (i, rank)'s input offset at i); above[j]: the
    // bytes rows above `rank` send to j (block (rank, j)'s output offset at j).
    let mut first = vec![0u32; n + 1];
    let mut before = vec![0u32; n];
    let mut left_sum = vec![0u64; n];
    let mut above = vec![0u64; n];
    let mut moving = 0u32;
    for i in 0..n {
        let row = &m[i * n..(i + 1) * n];
        let left = row[..rank].iter().filter(|&&v| v != 0).count() as u32;
        let right = row[rank..].iter().filter(|&&v| v != 0).count() as u32;
        before[i] = left;
        left_sum[i] = row[..rank].iter().sum();
        first[i + 1] = first[i] + left + right;
        moving += left + right - u32::from(row[i] != 0);
        if i < rank {
            for (a, &v) in above.iter_mut().zip(row) {
                *a += v;
            }
        }
    }
    let mut rp = RankPlan::empty("fanout", rank as u32, n as u32, cluster.gpus_per_server, digest);
    rp.input_bytes = traffic.row_sum(rank);
    rp.output_bytes = traffic.col_sum(rank);
    if moving > 0 {
        rp.moving_pairs.push((0, moving));
    }
    // Receives from rows above `rank`, then its own row (sends, the self copy among them),
    // then receives from rows below: ascending ids.
    let mut recv_off = 0u64; // output offset of block (i, rank): the column's prefix sum
    let push_recv = |rp: &mut RankPlan, i: usize, recv_off: &mut u64| {
        let len = m[i * n + rank];
        if len > 0 {
            let (t, seg) = block(cluster, i, rank, len, left_sum[i], *recv_off);
            rp.push(first[i] + before[i], &t, &[seg], &[]);
            *recv_off += len;
        }
    };
    for i in 0..rank {
        push_recv(&mut rp, i, &mut recv_off);
    }
    let (mut send_off, mut id) = (0u64, first[rank]);
    for j in 0..n {
        let len = m[rank * n + j];
        if len == 0 {
            continue;
        }
        let (t, seg) = block(cluster, rank, j, len, send_off, above[j]);
        rp.push(id, &t, &[seg], &[]);
        send_off += len;
        id += 1;
    }
    recv_off += m[rank * n + rank];
    for i in rank + 1..n {
        push_recv(&mut rp, i, &mut recv_off);
    }
    rp
}
