//! FAST (NSDI'26): skew-aware all-to-all(v) planning on two-tier clusters.
//!
//! 1. `balance`: equalise, per (source server, destination server) tile, what
//!    every NIC/GPU of the source carries, over scale-up (§4.1).
//! 2. `server_matrix`: collapse to the N×N server matrix and embed it into a
//!    scaled doubly stochastic matrix with phantom traffic (§4.4).
//! 3. `birkhoff`: peel one-to-one stages with bottleneck matchings (§4.2).
//! 4. `pipeline` + `redistribute`: scale-out stage k in step k+1, its
//!    redistribution beside stage k+1 (§4.3).
//!
//! Stage count: an exact decomposition of a dense matrix has ~N² stages (each
//! peels exactly one entry), most of them tiny. We peel exact bottleneck stages
//! while they are heavy (weight ≥ L / (STAGES_PER_SERVER·N)), then decompose
//! what is left on a grid of quanta (entries rounded up to whole quanta of
//! L_rest / (STAGES_PER_SERVER·N)), which bounds the tail to a few N stages
//! at a cost of less than one quantum per pair of the (small) tail. See docs/fast.md.
pub mod balance;
pub mod birkhoff;
pub mod bound;
pub mod cuts;
pub mod pipeline;
pub mod redistribute;
pub mod server_matrix;

pub use bound::worst_case_ratio;

use crate::error::Result;
use crate::invalid;
use crate::plan::rank_plan::RankPlan;
use crate::plan::{option_u64, Collective, Options, Plan, PlanBuilder};
use crate::topology::Cluster;
use crate::traffic::Traffic;
use birkhoff::{decompose, Stage};
use pipeline::{Loads, Round};
use server_matrix::{embed_doubly_stochastic, max_line_sum};

/// Granularity of the head threshold and the tail quantum, in stages per server.
pub const STAGES_PER_SERVER: u64 = 4;
/// Exact head levels before the quantised tail.
pub const HEAD_LEVELS: usize = 2;

/// Options `fast` understands, with their meaning.
pub const OPTIONS: &[(&str, &str)] = &[
    ("min_stage_bytes", "smallest scale-out stage per NIC (size, e.g. 1MiB; default 4 × alpha_scaleout × nic_bw): tail quanta are at least this, so tiny stages are merged by rounding pairs up to whole quanta"),
    ("order", "scale-out stage order: 'desc' (largest first, default) or 'asc' (appendix A's order)"),
    ("exact", "1: exact bottleneck Birkhoff decomposition without quantised tail (up to N²-2N+2 stages); default 0"),
];

/// Parsed options.
#[derive(Debug, Clone)]
pub struct FastOptions {
    pub min_stage_bytes: u64,
    pub ascending: bool,
    pub exact: bool,
}

impl FastOptions {
    pub fn parse(opts: &Options, cluster: &Cluster, algorithm: &str, extra_ok: &[&str]) -> Result<FastOptions> {
        for k in opts.keys() {
            if !OPTIONS.iter().any(|(o, _)| o == k) && !extra_ok.contains(&k.as_str()) {
                let known: Vec<&str> = OPTIONS.iter().map(|o| o.0).filter(|o| algorithm == "fast" || extra_ok.contains(o)).collect();
                return invalid!("unknown option '{k}' for {algorithm} (known: {})", known.join(", "));
            }
        }
        let default_min = (4u128 * cluster.alpha_scaleout_ns as u128 * cluster.nic_bw as u128 / 1_000_000_000) as u64;
        let ascending = match opts.get("order").map(|s| s.as_str()) {
            None | Some("desc") => false,
            Some("asc") => true,
            Some(o) => return invalid!("option 'order' must be 'asc' or 'desc', got '{o}'"),
        };
        let exact = match option_u64(opts, "exact", 0)? {
            0 => false,
            1 => true,
            v => return invalid!("option 'exact' must be 0 or 1, got {v}"),
        };
        Ok(FastOptions { min_stage_bytes: option_u64(opts, "min_stage_bytes", default_min)?, ascending, exact })
    }
}

/// A planned scale-out stage: server s sends `real[s]` bytes to `perm[s]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealStage {
    pub perm: Vec<u32>,
    /// Weight in the decomposition (real bytes of a pair never exceed it).
    pub weight: u64,
    pub real: Vec<u64>,
    /// From the exact head (true) or the quantised tail.
    pub exact: bool,
}

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// Hand the real bytes of each pair to its stages in decomposition order (real first,
/// phantom last), consuming `remaining`.
fn allocate(stages: Vec<Stage>, scale: u64, exact: bool, n: usize, remaining: &mut [u64], out: &mut Vec<RealStage>) {
    for st in stages {
        let w = st.weight.saturating_mul(scale);
        let mut real = vec![0u64; n];
        for (s, &d) in st.perm.iter().enumerate() {
            let d = d as usize;
            if d != s {
                let x = remaining[s * n + d].min(w);
                remaining[s * n + d] -= x;
                real[s] = x;
            }
        }
        out.push(RealStage { perm: st.perm, weight: w, real, exact });
    }
}

/// Stages of a decomposition: the exact head (bottleneck stages, every tight line busy in
/// each) followed by the quantised tail.
#[derive(Debug, Clone, Default)]
pub struct Decomposition {
    pub stages: Vec<RealStage>,
    pub head: usize,
}

/// Decompose the server matrix `server` (N×N, zero diagonal) into one-to-one stages.
/// `quantum_floor` is the smallest tail quantum in server bytes.
pub fn plan_stages(server: &[u64], n: usize, quantum_floor: u64, exact: bool) -> Decomposition {
    let stages = plan_stages_inner(server, n, quantum_floor, exact);
    let head = stages.iter().take_while(|s| s.exact).count();
    Decomposition { stages, head }
}

fn plan_stages_inner(server: &[u64], n: usize, quantum_floor: u64, exact: bool) -> Vec<RealStage> {
    let mut d = server.to_vec();
    let line = embed_doubly_stochastic(&mut d, n);
    let mut out = Vec::new();
    if line == 0 {
        return out;
    }
    let bound = n * n - 2 * n + 2;
    let mut remaining = server.to_vec();
    if exact {
        let mut head = Vec::new();
        decompose(&mut d, n, line, 1, usize::MAX, &mut head);
        allocate(head, 1, true, n, &mut remaining, &mut out);
        return out;
    }
    let per = STAGES_PER_SERVER * n as u64;
    let mut head = Vec::new();
    let saved = d.clone();
    // Exact levels: each peels the stages heavier than 1/(4N) of what is left, so the
    // quantised tail only rounds a small remainder.
    let mut rest = line;
    for _ in 0..HEAD_LEVELS {
        let head_min = ceil_div(rest, per).max(quantum_floor).max(1);
        let before = head.len();
        rest = decompose(&mut d, n, rest, head_min, usize::MAX, &mut head);
        if rest == 0 || head.len() == before {
            break;
        }
    }
    let head_stages = head.len();
    allocate(head, 1, true, n, &mut remaining, &mut out);
    if rest == 0 {
        return out;
    }
    // Tail: quantise the real bytes still unplaced, embed in quanta, decompose exactly.
    let rest_real = max_line_sum(&remaining, n);
    if rest_real == 0 {
        return out;
    }
    let q = ceil_div(rest_real, per).max(quantum_floor).max(1);
    let mut units: Vec<u64> = remaining.iter().map(|&v| ceil_div(v, q)).collect();
    let uline = embed_doubly_stochastic(&mut units, n);
    let mut tail = Vec::new();
    decompose(&mut units, n, uline, 1, usize::MAX, &mut tail);
    if head_stages + tail.len() > bound {
        // Keep Birkhoff's N²-2N+2 guarantee: finish the exact decomposition instead.
        let mut d = saved;
        let mut all = Vec::new();
        decompose(&mut d, n, line, 1, usize::MAX, &mut all);
        let mut remaining = server.to_vec();
        out.clear();
        allocate(all, 1, true, n, &mut remaining, &mut out);
        return out;
    }
    allocate(tail, q, false, n, &mut remaining, &mut out);
    debug_assert!(remaining.iter().all(|&v| v == 0));
    out
}

/// Plan order. The exact head first, largest stage first by default (ties by decomposition
/// order): every tight line is busy in each head stage, so any head order keeps it busy.
/// Then the quantised tail, where a tight line can have idle (phantom) slots: stages in
/// which more tight lines are active go first, so a bottleneck server idles as late as
/// possible, then by size. Stages without real bytes are dropped.
pub fn order_stages(dec: Decomposition, server: &[u64], n: usize, ascending: bool) -> Vec<RealStage> {
    let (rows, cols) = server_matrix::line_sums(server, n);
    let line = rows.iter().chain(cols.iter()).copied().max().unwrap_or(0);
    let tight_active = |st: &RealStage| -> usize {
        let mut k = 0;
        for (s, (&d, &real)) in st.perm.iter().zip(&st.real).enumerate() {
            if real > 0 {
                k += usize::from(rows[s] == line) + usize::from(cols[d as usize] == line);
            }
        }
        k
    };
    let Decomposition { mut stages, head } = dec;
    let mut tail: Vec<RealStage> = stages.split_off(head.min(stages.len()));
    let mut head = stages;
    head.retain(|s| s.real.iter().any(|&x| x > 0));
    tail.retain(|s| s.real.iter().any(|&x| x > 0));
    if ascending {
        head.sort_by_key(stage_size);
    } else {
        head.sort_by_key(|s| std::cmp::Reverse(stage_size(s)));
    }
    tail.sort_by_key(|s| (std::cmp::Reverse(tight_active(s)), if ascending { stage_size(s) } else { u64::MAX - stage_size(s) }));
    head.extend(tail);
    head
}

/// Stages are cut so none moves more than 1/MIN_PIPELINE_STAGES of the busiest line: with
/// few servers (one stage when N = 2) the first balancing and the last redistribution would
/// otherwise be exposed in full; cut, they overlap all but one small piece.
pub const MIN_PIPELINE_STAGES: u64 = 8;

/// Cut every stage whose largest pair exceeds `cap` bytes into equal consecutive parts
/// with the same permutation (still one-to-one).
pub fn split_large_stages(stages: Vec<RealStage>, cap: u64) -> Vec<RealStage> {
    let mut out = Vec::with_capacity(stages.len());
    for st in stages {
        let parts = ceil_div(stage_size(&st), cap).max(1);
        if parts == 1 {
            out.push(st);
            continue;
        }
        for k in 0..parts {
            let cut = |v: u64, k: u64| -> u64 { ((v as u128 * k as u128) / parts as u128) as u64 };
            let real: Vec<u64> = st.real.iter().map(|&r| cut(r, k + 1) - cut(r, k)).collect();
            out.push(RealStage { perm: st.perm.clone(), weight: cut(st.weight, k + 1) - cut(st.weight, k), real, exact: st.exact });
        }
    }
    out
}

/// Largest real bytes one pair moves in a stage (what the stage's duration scales with).
pub fn stage_size(st: &RealStage) -> u64 {
    st.real.iter().copied().max().unwrap_or(0)
}

/// Integer closed-form time estimate (ns) from the assembled loads.
pub fn predict_ns(cluster: &Cluster, loads: &Loads) -> u64 {
    let t = |bytes: u64, bw: u64| -> u64 { (bytes as u128 * 1_000_000_000 / bw.max(1) as u128) as u64 };
    let su = cluster.gpu_scaleup_bw();
    let mut total = 0u64;
    if loads.balance_max > 0 {
        total += cluster.alpha_scaleup_ns + t(loads.balance_max, su);
    }
    let mut scaleout = 0u64;
    for &b in &loads.round_nic_max {
        scaleout += cluster.alpha_scaleout_ns + t(b, cluster.nic_bw);
    }
    // The intra-server part runs beside the first round; it only shows if it is longer.
    let intra = if loads.intra_max > 0 { cluster.alpha_scaleup_ns + t(loads.intra_max, su) } else { 0 };
    let first = loads.round_nic_max.first().map(|&b| cluster.alpha_scaleout_ns + t(b, cluster.nic_bw)).unwrap_or(0);
    total += scaleout + intra.saturating_sub(first);
    if loads.last_redistribution_max > 0 {
        total += cluster.alpha_scaleup_ns + t(loads.last_redistribution_max, su);
    }
    total
}

/// Working memory of FAST and balanced_direct, owned by a caller that plans repeatedly (a
/// rank planning every step): reusing it, rather than allocating and faulting in fresh
/// pages per plan, made balancing 2–4× faster at 320 GPUs (docs/fast.md). Results never
/// depend on what a workspace held before (tested).
#[derive(Default)]
pub struct Workspace {
    pub(crate) bal: balance::Balanced,
    pub(crate) assemble: pipeline::AssembleScratch,
}

pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    plan_in(&mut Workspace::default(), traffic, cluster, opts)
}

/// `plan` in the caller's workspace.
pub fn plan_in(ws: &mut Workspace, traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    let o = FastOptions::parse(opts, cluster, "fast", &[])?;
    let n = cluster.servers as usize;
    let Workspace { bal, assemble } = ws;
    balance::balance_into(traffic, cluster, bal);
    crate::timeline::mark("servers balanced");
    let sched = schedule(traffic, &bal.server, n, cluster, &o);
    crate::timeline::mark("schedule computed");
    let b = PlanBuilder::new("fast", Collective::AllToAll { traffic: traffic.owned() }, cluster.gpus_per_server);
    let plan = finish_into(assemble, b, cluster, &o, bal, &sched).finish();
    crate::timeline::mark("plan finished");
    Ok(plan)
}

/// FAST's scale-out transfers as the plan will hold them, before it is assembled (see
/// `plan_unless`).
pub struct ScaleoutPreview<'a> {
    cluster: &'a Cluster,
    bal: &'a balance::Balanced,
    rounds: &'a [Round],
}

impl ScaleoutPreview<'_> {
    /// Every scale-out transfer in plan order: `each(round, sending NIC, receiving NIC,
    /// bytes)`, global NIC ids. A transfer depends on every transfer of the last earlier
    /// round in which its sending NIC sent and of the last in which its receiving NIC
    /// received (`pipeline::for_each_scaleout_transfer`).
    pub fn for_each_transfer(&self, each: impl FnMut(usize, usize, usize, u64)) {
        pipeline::for_each_scaleout_transfer(self.cluster, self.bal, self.rounds, each);
    }
}

/// `plan` (the same plan), unless `stop`, shown the scale-out transfers once balancing and
/// the schedule are done, returns `Some(x)`: then `Err(x)` without assembling the plan
/// (most of the planning time). For `auto`, which can often prune FAST by a bound
/// computed from them. Runs on the calling thread only.
pub fn plan_unless<X>(traffic: &Traffic, cluster: &Cluster, opts: &Options, stop: impl FnOnce(&ScaleoutPreview) -> Option<X>) -> Result<std::result::Result<Plan, X>> {
    let o = FastOptions::parse(opts, cluster, "fast", &[])?;
    let n = cluster.servers as usize;
    let mut bal = balance::Balanced::default();
    balance::balance_into(traffic, cluster, &mut bal);
    let bal = &bal;
    let sched = schedule(traffic, &bal.server, n, cluster, &o);
    let preview = ScaleoutPreview { cluster, bal, rounds: &sched.rounds };
    if let Some(x) = stop(&preview) {
        return Ok(Err(x));
    }
    let b = PlanBuilder::new("fast", Collective::AllToAll { traffic: traffic.owned() }, cluster.gpus_per_server);
    Ok(Ok(finish_into(&mut pipeline::AssembleScratch::default(), b, cluster, &o, bal, &sched).finish()))
}

/// The scale-out rounds and the counts the plan's meta reports.
struct Schedule {
    rounds: Vec<Round>,
    birkhoff_stages: usize,
    decomposed: usize,
    exact_stages: usize,
}

/// Head stages considered for the first round.
const FIRST_STAGE_CANDIDATES: usize = 4;

/// Largest first, except that when the largest stage would make a carrier idle at the start
/// past its lines' slack (`first_round_wait_ns`), the first round goes to the stage of the
/// first `FIRST_STAGE_CANDIDATES` with the shortest such idle (ties keep the order); the
/// others keep their order. On h200:32 Zipf 0.99 the largest stage left a bottleneck carrier
/// idle 0.6 ms (~0.5 GB to receive over scale-up, 0.6 ms of its own bytes to send):
/// 1.0059 → 1.0036 of the bound; h200:16 Zipf 0.99 seed 1 1.0117 → 1.0066; no other change
/// over 72 h200/mi300x cases of 4–32 servers (Zipf 0.8/0.99, seeds 0–5).
fn pick_first_stage(traffic: &Traffic, cluster: &Cluster, server: &[u64], stages: &mut Vec<RealStage>) {
    let Some(first) = stages.first() else { return };
    let wait = first_round_wait_ns(traffic, cluster, server, first);
    if wait == 0 {
        return;
    }
    let rest = stages.iter().take(FIRST_STAGE_CANDIDATES).skip(1).map(|st| first_round_wait_ns(traffic, cluster, server, st));
    let waits: Vec<u64> = std::iter::once(wait).chain(rest).collect();
    if let Some(best) = (0..waits.len()).min_by_key(|&i| (waits[i], i)) {
        let st = stages.remove(best);
        stages.insert(0, st);
    }
}

/// How long a carrier would idle at the start if `st` went first, beyond what its server
/// pair's lines can afford (ns, the largest over carriers): a carrier sends its own bytes of
/// the tile first, then bytes balanced in from its server's other GPUs, which arrive with
/// all of that tile's balancing into it (one transfer per sender: the round waits for the
/// whole transfer). It idles when its share of the stage exceeds its own bytes and the
/// balanced-in bytes take longer over scale-up than its own bytes over its NIC share; the
/// idle counts only past the slack of the busier of the sender's row and the receiver's
/// column to the busiest line (a line with slack finishes early anyway). Integer-only.
fn first_round_wait_ns(traffic: &Traffic, cluster: &Cluster, server: &[u64], st: &RealStage) -> u64 {
    let (n, g, nics) = (cluster.servers as usize, cluster.gpus_per_server as usize, cluster.nics_per_server as usize);
    let p = n * g;
    let up = cluster.gpu_scaleup_bw().max(1) as u128;
    let nic = (cluster.nic_bw as u128 * nics as u128 / g as u128).max(1);
    let mut target = vec![0u64; g];
    let mut worst = 0u64;
    // A server pair can idle as long as the busier of its two lines (the sender's row, the
    // receiver's column) has slack to the busiest line of all.
    let line_out = |s: usize| -> u64 { (0..n).filter(|&d| d != s).map(|d| server[s * n + d]).sum() };
    let line_in = |d: usize| -> u64 { (0..n).filter(|&s| s != d).map(|s| server[s * n + d]).sum() };
    let most = (0..n).map(|x| line_out(x).max(line_in(x))).max().unwrap_or(0);
    let server_nics = (cluster.nic_bw as u128 * nics as u128).max(1);
    for (s, &d) in st.perm.iter().enumerate() {
        let d = d as usize;
        let r = server[s * n + d];
        if st.real[s] == 0 || r == 0 || s == d {
            continue;
        }
        let slack = ((most - line_out(s).max(line_in(d))) as u128 * 1_000_000_000 / server_nics).min(u64::MAX as u128) as u64;
        balance::carrier_targets(r, s, d, g, nics, &mut target);
        for (c, &t) in target.iter().enumerate() {
            let row: u64 = traffic.data()[(s * g + c) * p + d * g..(s * g + c) * p + (d + 1) * g].iter().sum();
            let own = row.min(t);
            let share = (st.real[s] as u128 * t as u128 / r as u128) as u64;
            if share <= own {
                continue;
            }
            let arrive = (t - own) as u128 * 1_000_000_000 / up;
            let own_done = own as u128 * 1_000_000_000 / nic;
            worst = worst.max((arrive.saturating_sub(own_done).min(u64::MAX as u128) as u64).saturating_sub(slack));
        }
    }
    worst
}

fn schedule(traffic: &Traffic, server: &[u64], n: usize, cluster: &Cluster, o: &FastOptions) -> Schedule {
    let quantum_floor = o.min_stage_bytes.saturating_mul(cluster.nics_per_server as u64);
    let dec = plan_stages(server, n, quantum_floor, o.exact);
    let decomposed = dec.stages.len();
    crate::timeline::mark("stages decomposed");
    let mut stages = order_stages(dec, server, n, o.ascending);
    if !o.ascending {
        pick_first_stage(traffic, cluster, server, &mut stages);
    }
    crate::timeline::mark("stages ordered");
    let birkhoff_stages = stages.len();
    let exact_stages = stages.iter().filter(|s| s.exact).count();
    let line = max_line_sum(server, n);
    let stages = split_large_stages(stages, ceil_div(line, MIN_PIPELINE_STAGES).max(quantum_floor).max(1));
    let rounds: Vec<Round> = stages
        .iter()
        .map(|st| Round {
            pairs: st.perm.iter().enumerate().filter(|&(s, _)| st.real[s] > 0).map(|(s, &d)| (s as u32, d, st.real[s])).collect(),
        })
        .collect();
    Schedule { rounds, birkhoff_stages, decomposed, exact_stages }
}

/// Digest of FAST's decisions: the tile totals (`server`, N×N) and every round's server
/// pairs with their bytes. Every rank computes both alike, before its own balancing; the
/// balancing amounts follow from the matrix, which the inputs' hash covers.
pub fn decisions_of(server: &[u64], rounds: &[Round]) -> u64 {
    let mut h = crate::plan::hash::Fnv64::new();
    h.write_u64s(server);
    let mut words = Vec::new();
    for r in rounds {
        words.clear();
        words.extend(r.pairs.iter().flat_map(|&(s, d, x)| [u64::from(s) << 32 | u64::from(d), x]));
        h.write_u64s(&words);
    }
    h.finish()
}

/// `rank`'s part of FAST's plan: the same decisions and the same assembly as `plan`, run
/// over the rank's part only. Deciding is the tile totals (one pass over the matrix) and
/// the schedule, which every rank computes alike; the rank then balances only the tiles its
/// server sends or receives (`balance::balance_rank`) and assembles its own transfers
/// (`pipeline::assemble_rank`) into a builder that keeps only them (`PlanBuilder::for_rank`).
/// Returns the rank plan with the digest of the decisions (before the inputs are mixed in)
/// and the nanoseconds spent deciding.
pub fn plan_rank(ws: &mut Workspace, traffic: &Traffic, cluster: &Cluster, opts: &Options, rank: u32) -> Result<(RankPlan, u64, u64)> {
    let t0 = std::time::Instant::now();
    let o = FastOptions::parse(opts, cluster, "fast", &[])?;
    let n = cluster.servers as usize;
    let Workspace { bal, assemble } = ws;
    balance::server_totals(traffic, cluster, bal);
    crate::timeline::mark("tile totals");
    let sched = schedule(traffic, &bal.server, n, cluster, &o);
    crate::timeline::mark("schedule computed");
    let decide_ns = t0.elapsed().as_nanos() as u64;
    let r = rank as usize;
    balance::balance_rank(traffic, cluster, r / cluster.gpus_per_server as usize, bal);
    crate::timeline::mark("rank's tiles balanced");
    let b = PlanBuilder::for_rank("fast", traffic.n() as u32, cluster.gpus_per_server, rank, traffic.row_sum(r), traffic.col_sum(r));
    let (rp, _) = pipeline::assemble_rank(assemble, b, cluster, bal, &sched.rounds, true).finish_rank().expect("a one-rank builder");
    crate::timeline::mark("rank assembled");
    Ok((rp, decisions_of(&bal.server, &sched.rounds), decide_ns))
}

fn finish_into(scratch: &mut pipeline::AssembleScratch, b: PlanBuilder, cluster: &Cluster, o: &FastOptions, bal: &balance::Balanced, sched: &Schedule) -> PlanBuilder {
    let n = cluster.servers as usize;
    let rounds = &sched.rounds;
    let (mut b, loads) = pipeline::assemble_with(scratch, b, cluster, bal, rounds, true);
    b.set_meta("stages", sched.birkhoff_stages);
    b.set_meta("scaleout_rounds", rounds.len());
    b.set_meta("decomposition_stages", sched.decomposed);
    b.set_meta("exact_stages", sched.exact_stages);
    b.set_meta("predicted_time_ns", predict_ns(cluster, &loads));
    b.set_meta("min_stage_bytes", o.min_stage_bytes);
    b.set_meta("order", if o.ascending { "asc" } else { "desc" });
    b.set_meta("server_max_line_bytes", max_line_sum(&bal.server, n));
    b.set_decisions(decisions_of(&bal.server, rounds));
    b
}

#[cfg(test)]
mod tests {
    use crate::algo::plan_all_to_all;
    use crate::plan::{recycle, verify::verify, Options};
    use crate::traffic::generators;
    use crate::Cluster;

    /// The start idle of a first stage: a carrier with none of its own bytes in the tile waits
    /// for all its balanced-in bytes over scale-up; a tile whose GPUs send equally never
    /// waits; the pick moves a stage without idle to the front and keeps the others' order.
    #[test]
    fn first_stage_pick_avoids_a_start_idle() {
        use super::{first_round_wait_ns, pick_first_stage, RealStage};
        let c = Cluster::parse("h200:3,gpus=2,nics=2").unwrap();
        let mut t = crate::Traffic::new(6, vec![0; 36]).unwrap();
        let x = 900_000_000u64;
        // Server 0: only GPU 0 sends to server 1 (GPU 1 must carry half, all balanced in
        // from GPU 0); both GPUs send equally to server 2, as do servers 1 and 2 wherever
        // they send. Server 0's row (2x) is a busiest line: the pair 0 → 1 has no slack.
        t.set(0, 2, x / 2);
        t.set(0, 3, x / 2);
        for (i, j) in [(0, 4), (1, 5), (2, 4), (3, 5), (4, 0), (5, 1)] {
            t.set(i, j, x / 2);
        }
        for (i, j) in [(2, 0), (3, 1)] {
            t.set(i, j, x / 2);
        }
        let server = super::server_matrix::tile_totals(t.data(), 3, 2);
        let stage = |perm: Vec<u32>| RealStage { real: perm.iter().enumerate().map(|(s, &d)| server[s * 3 + d as usize]).collect(), perm, weight: x, exact: true };
        let skewed = stage(vec![1, 2, 0]);
        let even = stage(vec![2, 0, 1]);
        // GPU 1 receives x/2 at 450 GB/s before it can send anything: 1 ms.
        assert_eq!(first_round_wait_ns(&t, &c, &server, &skewed), (x / 2) * 1_000_000_000 / c.gpu_scaleup_bw());
        assert_eq!(first_round_wait_ns(&t, &c, &server, &even), 0);
        let mut stages = vec![skewed.clone(), even.clone()];
        pick_first_stage(&t, &c, &server, &mut stages);
        assert_eq!(stages[0].perm, even.perm);
        assert_eq!(stages[1].perm, skewed.perm);
        let mut kept = vec![even.clone(), skewed];
        pick_first_stage(&t, &c, &server, &mut kept);
        assert_eq!(kept[0].perm, even.perm, "no idle: the order stays");
    }

    /// Recycled plan arrays must not leak into plans: plan A,
    /// then a larger and a smaller plan (recycled in between), then A again.
    #[test]
    fn reused_memory_does_not_change_plans() {
        let small = Cluster::parse("h200:3,nics=2").unwrap();
        let large = Cluster::parse("h200:6").unwrap();
        let a = generators::zipf(small.num_gpus() as usize, 0.8, 1 << 20, 7).unwrap();
        let b = generators::zipf(large.num_gpus() as usize, 0.99, 4 << 20, 8).unwrap();
        let c = generators::uniform(small.num_gpus() as usize, 3 << 20, 9).unwrap();
        for algo in ["fast", "balanced_direct"] {
            let first = plan_all_to_all(&a, &small, algo, &Options::new()).unwrap();
            verify(&first).unwrap();
            let hash = first.hash();
            recycle(first);
            for (t, cl) in [(&b, &large), (&c, &small)] {
                let p = plan_all_to_all(t, cl, algo, &Options::new()).unwrap();
                verify(&p).unwrap();
                recycle(p);
            }
            let again = plan_all_to_all(&a, &small, algo, &Options::new()).unwrap();
            assert_eq!(again.hash(), hash, "{algo}: plan changed after reusing memory");
        }
    }
}
