//! Spread-out all-to-all (MPI's pairwise exchange): P rounds; in round r rank i
//! sends its block to rank (i + r) mod P, so each round is a permutation and no
//! receiver sees more than one sender at a time. Round 0 is the local copy of
//! the self block. Blocks go straight from Input to Output at the torch offsets.
use crate::error::Result;
use crate::invalid;
use crate::plan::rank_plan::RankPlan;
use crate::plan::{Buf, Collective, Op, Options, Plan, PlanBuilder, Segment, Transfer};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    reject_options("spreadout", opts)?;
    let n = traffic.n();
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let mut b = PlanBuilder::new("spreadout", Collective::AllToAll { traffic: traffic.clone() }, cluster.gpus_per_server);
    b.reserve(n * n, n * n);
    // Latest non-empty send and receive of each rank: MPI posts round r's pair only
    // after round r-1's send and receive completed on that rank.
    let mut last_send: Vec<Option<u32>> = vec![None; n];
    let mut last_recv: Vec<Option<u32>> = vec![None; n];
    let mut busy_rounds = 0u32;
    for r in 0..n {
        let mut any = false;
        // Ids of this round, applied after the round so that deps point to earlier rounds only.
        let mut sent: Vec<(usize, usize, u32)> = Vec::new();
        for i in 0..n {
            let j = (i + r) % n;
            let len = traffic.get(i, j);
            if len == 0 {
                continue;
            }
            let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + j], dst_buf: Buf::Output, dst_off: recv[i * n + j], len };
            let mut deps: Vec<u32> = last_send[i].into_iter().chain(last_recv[i]).collect();
            deps.dedup();
            let id = b.transfer(i as u32, j as u32, Op::Copy, cluster.tier(i as u32, j as u32), r as u32, &[seg], &deps);
            sent.push((i, j, id));
            any = true;
        }
        for (i, j, id) in sent {
            last_send[i] = Some(id);
            last_recv[j] = Some(id);
        }
        busy_rounds += any as u32;
    }
    b.set_meta("rounds", n);
    b.set_meta("nonempty_rounds", busy_rounds);
    Ok(b.finish())
}

/// `rank`'s part of `plan`: in round r it sends to rank + r and receives from rank − r,
/// in the whole plan's order (a round's transfers run by sender). Reads the rank's row and
/// column, plus, per receive in the second half of the rounds, the sender's column until
/// its first earlier receive. A receive's deps are the sender's latest earlier send and
/// receive; only the latter can involve this rank (when this rank was that sender in round
/// P − r). With `count_pairs`, one counting pass over the matrix gives the moving pairs.
pub fn plan_rank(traffic: &Traffic, cluster: &Cluster, rank: usize, digest: u64, count_pairs: bool) -> RankPlan {
    let n = traffic.n();
    let m = traffic.data();
    let x = rank;
    let mut rp = RankPlan::empty("spreadout", x as u32, n as u32, cluster.gpus_per_server, digest);
    rp.input_bytes = traffic.row_sum(x);
    rp.output_bytes = traffic.col_sum(x);
    if count_pairs {
        let mut total = vec![0u32; n];
        for i in 0..n {
            for (j, &v) in m[i * n..(i + 1) * n].iter().enumerate() {
                if v != 0 {
                    total[if j >= i { j - i } else { j + n - i }] += 1;
                }
            }
        }
        rp.moving_pairs = Some((1..n).filter(|&r| total[r] > 0).map(|r| (r as u32, total[r])).collect());
    }
    // The peer's offsets are not this rank's to know (`RankPlan::finish` clears them).
    let transfer = |i: usize, j: usize, r: usize, src_off: u64, dst_off: u64| {
        let seg = Segment { src_buf: Buf::Input, src_off, dst_buf: Buf::Output, dst_off, len: m[i * n + j] };
        let t = Transfer { src: i as u32, dst: j as u32, op: Op::Copy, tier: cluster.tier(i as u32, j as u32), step: r as u32, seg_begin: 0, seg_end: 0, dep_begin: 0, dep_end: 0 };
        (t, seg)
    };
    // Input offsets of this rank's blocks, by receiver (torch's layout: in column order).
    let mut send_off = vec![0u64; n];
    let mut at = 0u64;
    for (j, off) in send_off.iter_mut().enumerate() {
        *off = at;
        at += m[x * n + j];
    }
    // Output offsets of the blocks this rank receives, by sender.
    let mut recv_off = vec![0u64; n];
    let mut at = 0u64;
    for (i, off) in recv_off.iter_mut().enumerate() {
        *off = at;
        at += m[i * n + x];
    }
    // Ids: a local count in plan order (round, then sender).
    let mut next = 0u32;
    let mut send_id: Vec<Option<u32>> = vec![None; n];
    let (mut last_send, mut last_recv): (Option<u32>, Option<u32>) = (None, None);
    for r in 0..n {
        let j = (x + r) % n;
        let mut send = None;
        if m[x * n + j] > 0 {
            let mut deps: Vec<u32> = last_send.into_iter().chain(last_recv).collect();
            deps.dedup();
            let (t, seg) = transfer(x, j, r, send_off[j], if j == x { recv_off[x] } else { 0 });
            send = Some((x, t, seg, deps));
        }
        let i = (x + n - r) % n;
        let mut recv = None;
        if r > 0 && m[i * n + x] > 0 {
            // Sender i's latest receive before round r is from this rank when that was round
            // P − r (< r) and i received nothing in between.
            let back = n - r;
            let dep = match send_id[back] {
                Some(id) if back < r && (back + 1..r).all(|q| m[((i + n - q) % n) * n + i] == 0) => vec![id],
                _ => vec![],
            };
            let (t, seg) = transfer(i, x, r, 0, recv_off[i]);
            recv = Some((i, t, seg, dep));
        }
        let mut both: Vec<_> = send.into_iter().chain(recv).collect();
        both.sort_by_key(|e| e.0);
        for (sender, t, seg, deps) in both {
            let id = next;
            next += 1;
            rp.push(id, &t, std::slice::from_ref(&seg), &deps);
            if sender == x {
                send_id[r] = Some(id);
                last_send = Some(id);
                if r == 0 {
                    last_recv = Some(id);
                }
            } else {
                last_recv = Some(id);
            }
        }
    }
    rp.finish();
    rp
}

/// The baselines take no knobs; a typo must not pass silently.
pub(crate) fn reject_options(algorithm: &str, opts: &Options) -> Result<()> {
    match opts.keys().next() {
        None => Ok(()),
        Some(k) => invalid!("{algorithm} takes no options, got '{k}'"),
    }
}
