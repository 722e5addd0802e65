//! Turning balanced pieces and scale-out rounds into a Plan (FAST §4.3, Fig. 11).
//!
//! Steps: 0 balancing (scale-up); 1 the intra-server part of the all-to-all
//! (self copies and same-server pairs) beside the first scale-out round;
//! round k's scale-out in step k+1; its redistribution in step k+2, beside
//! round k+1's scale-out. Dependencies are exactly what the data needs, plus
//! the NIC order of the rounds: a scale-out transfer waits for the previous
//! round's transfers of its sending NIC and of its receiving NIC, which keeps
//! every NIC one-to-one in an asynchronous execution too, without making a
//! server wait for rounds in which it has nothing (phantom) to move.
use super::balance::Balanced;
use super::balance::refill;
use super::cuts::{Cut, Cuts};
use super::redistribute::Redistributor;
use crate::plan::{Buf, Collective, Op, PlanBuilder, Segment};
use crate::topology::{Cluster, Tier};
use crate::traffic::Traffic;

/// One scale-out round: `(s, d, real bytes)` server pairs moving at once.
pub struct Round {
    pub pairs: Vec<(u32, u32, u64)>,
}

/// Loads the predictor needs, collected while assembling.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Loads {
    /// Max scale-up bytes any GPU sends or receives while balancing.
    pub balance_max: u64,
    /// Max bytes any NIC sends or receives, per round.
    pub round_nic_max: Vec<u64>,
    /// Max bytes any GPU sends or receives in the last round's redistribution.
    pub last_redistribution_max: u64,
    /// Max bytes any GPU sends or receives in the intra-server part.
    pub intra_max: u64,
}

/// Append `seg` to a transfer's segments, extending the last one instead when `seg`
/// continues it in both source and destination (same bytes moved, fewer descriptors).
#[inline]
pub(crate) fn push_merged(segs: &mut Vec<Segment>, seg: Segment) {
    if let Some(last) = segs.last_mut() {
        if last.src_buf == seg.src_buf && last.dst_buf == seg.dst_buf && last.src_off + last.len == seg.src_off && last.dst_off + last.len == seg.dst_off {
            last.len += seg.len;
            return;
        }
    }
    segs.push(seg);
}

/// `push_merged` for a transfer whose segments start at `begin` of `segs`.
#[inline]
fn push_merged_from(segs: &mut Vec<Segment>, begin: usize, seg: Segment) {
    if segs.len() > begin {
        let last = segs.last_mut().unwrap();
        if last.src_buf == seg.src_buf && last.dst_buf == seg.dst_buf && last.src_off + last.len == seg.src_off && last.dst_off + last.len == seg.dst_off {
            last.len += seg.len;
            return;
        }
    }
    segs.push(seg);
}

/// `out` = the sorted union of two ascending lists without repeats (id lists are filled
/// in id order, so this is what sorting and deduplicating their concatenation gives).
#[inline]
fn merge_unique(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        i += usize::from(a[i] == x);
        j += usize::from(b[j] == x);
        out.push(x);
    }
    for &x in a[i..].iter().chain(&b[j..]) {
        out.push(x);
    }
}

/// Sort `v[begin..]` and drop repeats in it (the lists are a few ids long).
#[inline]
fn sort_dedup_tail(v: &mut Vec<u32>, begin: usize) {
    let tail = &mut v[begin..];
    if tail.len() < 2 {
        return;
    }
    tail.sort_unstable();
    let mut w = 1;
    for r in 1..tail.len() {
        if tail[r] != tail[w - 1] {
            tail[w] = tail[r];
            w += 1;
        }
    }
    v.truncate(begin + w);
}

/// Short id lists, one per key, with a fixed capacity each, in one flat array: no
/// allocation per key or per round.
#[derive(Default)]
struct IdLists {
    cap: usize,
    len: Vec<u32>,
    ids: Vec<u32>,
}

impl IdLists {
    /// Empty lists for `keys` keys of at most `cap` ids each, reusing the allocation.
    fn reset(&mut self, keys: usize, cap: usize) {
        self.cap = cap;
        refill(&mut self.len, keys, 0);
        // Slots are written before they are read (`len` guards them): no need to clear.
        if self.ids.len() < keys * cap {
            self.ids.resize(keys * cap, 0);
        }
    }
    #[inline]
    fn push(&mut self, k: usize, id: u32) {
        let l = self.len[k] as usize;
        assert!(l < self.cap, "IdLists capacity {} exceeded", self.cap);
        self.ids[k * self.cap + l] = id;
        self.len[k] += 1;
    }
    #[inline]
    fn get(&self, k: usize) -> &[u32] {
        &self.ids[k * self.cap..k * self.cap + self.len[k] as usize]
    }
}

/// Per NIC, the ids of its transfers in the last round it was active in (`last`) and in
/// the round being assembled (`cur`): two lists per key whose roles flip, so closing a
/// round copies nothing.
#[derive(Default)]
struct RoundLists {
    lists: IdLists,
    cur_side: Vec<u8>,
}

impl RoundLists {
    fn reset(&mut self, keys: usize, cap: usize) {
        self.lists.reset(2 * keys, cap);
        refill(&mut self.cur_side, keys, 0);
    }
    #[inline]
    fn last(&self, k: usize) -> &[u32] {
        self.lists.get(2 * k + 1 - self.cur_side[k] as usize)
    }
    #[inline]
    fn push_cur(&mut self, k: usize, id: u32) {
        self.lists.push(2 * k + self.cur_side[k] as usize, id);
    }
    /// If `k` was `busy` this round (some transfer used it; one rank's expansion writes only
    /// its own, so this is not read from the list), its current list becomes its last one.
    #[inline]
    fn close_round(&mut self, k: usize, busy: bool) {
        if busy {
            self.cur_side[k] ^= 1;
            self.lists.len[2 * k + self.cur_side[k] as usize] = 0;
        }
    }
}

/// Balancing classes for a schedule of `rounds` rounds: the first round, then doubling
/// round ranges (see `class_of_round`), at most `MAX_BALANCE_CLASSES`; at least two, as a
/// tile in no round (none has bytes then) takes the last class.
fn balance_classes(rounds: usize) -> usize {
    if rounds <= 2 {
        return 2;
    }
    (2 + (rounds - 1).ilog2() as usize).min(MAX_BALANCE_CLASSES)
}

/// At most this many balancing classes: rounds 0, 1, 2–3, 4+. Eight classes (up to round
/// 64+) measured the same on h200:4–32 with 1–4% more transfers.
const MAX_BALANCE_CLASSES: usize = 4;

/// Class of the balancing bytes a round `k` (0-based) sends first: 0 for the first round,
/// 1 + ⌊log2 k⌋ after it, the last class for everything beyond.
fn class_of_round(k: usize, classes: usize) -> usize {
    if k == 0 { 0 } else { (1 + k.ilog2() as usize).min(classes - 1) }
}

/// The assembler's working arrays, reused across calls (see `scratch`).
#[derive(Default)]
pub struct AssembleScratch {
    tile_class: Vec<u8>,
    /// A server's balancing moves (indices), one list per class.
    class_moves: [Vec<u32>; MAX_BALANCE_CLASSES],
    bal_id: Vec<u32>,
    bal_out: Vec<u64>,
    bal_in: Vec<u64>,
    deps: Vec<u32>,
    urgent_from: IdLists,
    urgent_into: IdLists,
    intra_load: Vec<u64>,
    cuts: Cuts,
    rounds_state: RoundState,
}

/// What one rank's expansion (`assemble_rank`) needs beside the decisions.
#[derive(Clone, Copy)]
struct Focus<'a> {
    /// The rank's server, local index and NIC index.
    x: usize,
    i: usize,
    lane: usize,
    /// Per visit of a tile server x has no part in, whether a carrier on the rank's NIC
    /// index moves bytes (`Cuts::lane_busy`).
    lane_busy: &'a [bool],
}

/// Assemble the plan. `chain_nics` orders successive rounds per NIC (FAST); without it all
/// rounds may overlap (balanced_direct has a single round anyway).
pub fn assemble(name: &str, traffic: &Traffic, cluster: &Cluster, bal: &Balanced, rounds: &[Round], chain_nics: bool) -> (PlanBuilder, Loads) {
    assemble_collective(name, Collective::AllToAll { traffic: traffic.owned() }, cluster, bal, rounds, chain_nics)
}

/// `assemble` with the plan's collective (`AllToAll` of the balanced matrix) built by the
/// caller: copying a large matrix can then happen elsewhere, e.g. on another thread.
pub fn assemble_collective(name: &str, collective: Collective, cluster: &Cluster, bal: &Balanced, rounds: &[Round], chain_nics: bool) -> (PlanBuilder, Loads) {
    let b = PlanBuilder::new(name, collective, cluster.gpus_per_server);
    assemble_with(&mut AssembleScratch::default(), b, cluster, bal, rounds, chain_nics)
}

/// `assemble_collective` into the builder `b` (a whole plan's, or one rank's: see
/// `PlanBuilder::for_rank`), with the caller's working arrays.
pub fn assemble_with(scratch: &mut AssembleScratch, b: PlanBuilder, cluster: &Cluster, bal: &Balanced, rounds: &[Round], chain_nics: bool) -> (PlanBuilder, Loads) {
    assemble_inner(scratch, b, cluster, bal, rounds, chain_nics, false)
}

/// One rank's part of `assemble_with`'s plan, into `b` (a `PlanBuilder::for_rank`), from a
/// balancing for the rank (`balance::balance_rank`): the same code, run only over what the
/// rank takes part in — its server's balancing and same-server blocks, and the visits its
/// server sends or receives in (its own carrier's cuts when sending, every carrier's when
/// receiving, for the redistribution it gets). Its transfers come in the whole plan's order
/// under ids of their own (`RankPlan::finish` re-keys them). Of the other servers' visits it
/// reads only whether the carriers on its NIC index move bytes (the NIC chains of its own
/// transfers). Its loads are not the whole plan's (the rank plan has no meta).
pub fn assemble_rank(scratch: &mut AssembleScratch, b: PlanBuilder, cluster: &Cluster, bal: &Balanced, rounds: &[Round], chain_nics: bool) -> PlanBuilder {
    assert!(b.rank().is_some(), "assemble_rank: a one-rank builder");
    assemble_inner(scratch, b, cluster, bal, rounds, chain_nics, true).0
}

fn assemble_inner(scratch: &mut AssembleScratch, mut b: PlanBuilder, cluster: &Cluster, bal: &Balanced, rounds: &[Round], chain_nics: bool, focused: bool) -> (PlanBuilder, Loads) {
    let AssembleScratch {
        tile_class,
        class_moves,
        bal_id,
        bal_out,
        bal_in,
        deps,
        urgent_from,
        urgent_into,
        intra_load,
        cuts,
        rounds_state,
    } = scratch;
    let n = bal.servers;
    let g = bal.gpus;
    let p = n * g;
    let nics = cluster.nics_per_server as usize;
    // Upper bounds, so no array of the plan is ever regrown (and copied). Untouched
    // capacity costs only address space.
    let pair_visits: usize = rounds.iter().map(|r| r.pairs.len()).sum::<usize>() * g;
    let scaleout_segs = bal.num_pieces() + pair_visits;
    let scaleout_transfers = 2 * pair_visits;
    b.reserve(
        bal.num_moves() + bal.num_intra() + scaleout_transfers + scaleout_segs.min(scaleout_transfers * g.saturating_sub(1)),
        bal.num_moves() + bal.num_intra() + 2 * scaleout_segs,
    );
    // Most transfers have one or two deps: an estimate (dep lists are short, growth is rare).
    b.reserve_deps(2 * (bal.num_moves() + bal.num_intra() + scaleout_segs) + scaleout_transfers * 2);
    let mut loads = Loads::default();

    // Scale-out rounds with their redistribution. First the cut pass (`cuts`): per tile,
    // where each visit of each carrier starts and how many bytes it moves; then the
    // rounds, which read those cuts in visit order.
    let classes = balance_classes(rounds.len());
    refill(tile_class, n * n, (classes - 1) as u8);
    for (k, round) in rounds.iter().enumerate().rev() {
        let class = class_of_round(k, classes) as u8;
        for &(s, d, _) in &round.pairs {
            tile_class[s as usize * n + d as usize] = class;
        }
    }
    let intra_step = u32::from(!rounds.is_empty() || bal.num_moves() > 0);
    // One rank: cut only the visits of its server's tiles (see `Cuts::make_rank`).
    let focus = if focused {
        let rank = b.rank().expect("a one-rank builder") as usize;
        cuts.make_rank(bal, rounds, rank);
        crate::timeline::mark("rank's cuts");
        Some((rank / g, rank % g))
    } else {
        cuts.make(bal, rounds);
        None
    };
    // Only one rank's rows are kept: the others' balancing and intra-server transfers
    // need not be written (their loads are not kept either).
    let only_rank = focus.map(|(x, i)| x * g + i);
    let mut write_balancing_and_intra = || {
        // Step 0: balancing, Input → carrier's Scratch. A tile's moves belong to the class of
        // the first round that sends it: class 0 the first round ("urgent"), then round
        // ranges 1, 2–3, 4+ (`class_of_round`). Per (server, a, c) one transfer per class.
        // The later classes wait for all of a's and c's urgent transfers, so the scale-up
        // ports serve the first round first; among themselves they share the ports, and a
        // round waits only for its own class, not behind the bytes of much later rounds (a
        // small early class finishes early under fair sharing). Chaining the classes
        // (t after t − 1) was worse: h200:8 Zipf 0.99 1.0056 → 1.0124–1.0154 of the bound.
        refill(bal_id, n * g * g * classes, u32::MAX);
        refill(bal_out, p, 0);
        refill(bal_in, p, 0);
        // Urgent balancing transfers sent by / received by each rank: later scale-up work on
        // that rank's port (the other classes, the intra-server part) waits for them.
        // At most one urgent transfer per (a, c), so g per rank and direction.
        urgent_from.reset(p, g);
        urgent_into.reset(p, g);
        deps.clear();
        // One rank's balancing kept only its server's moves.
        {
            let moves = bal.all_moves();
            let mut server_begin = 0;
            while server_begin < moves.len() {
                let s = moves[server_begin].s as usize;
                let mut server_end = server_begin;
                while server_end < moves.len() && moves[server_end].s as usize == s {
                    server_end += 1;
                }
                // The server's moves by class, (a, c) order kept in each: one pass, pushing
                // move indices into per-class lists.
                for list in class_moves.iter_mut() {
                    list.clear();
                }
                for (k, m) in moves[server_begin..server_end].iter().enumerate() {
                    class_moves[tile_class[s * n + m.d as usize] as usize].push((server_begin + k) as u32);
                }
                for (class, list) in class_moves[..classes].iter().enumerate() {
                    let mut at = 0;
                    while at < list.len() {
                        let (a, c) = {
                            let m = &moves[list[at] as usize];
                            (m.a as usize, m.c as usize)
                        };
                        let (src, dst) = (s * g + a, s * g + c);
                        // One rank: a move between two other GPUs is neither written nor
                        // numbered (no row of the rank depends on it: its scale-out deps are
                        // on the moves into its own carrier, its later classes on its own).
                        if only_rank.is_some_and(|r| r != src && r != dst) {
                            while list.get(at).is_some_and(|&k| moves[k as usize].a as usize == a && moves[k as usize].c as usize == c) {
                                at += 1;
                            }
                            continue;
                        }
                        // Segments and deps go straight into the plan's arrays.
                        let (psegs, pdeps) = b.lists_mut();
                        let (seg_begin, dep_begin) = (psegs.len(), pdeps.len());
                        while let Some(&k) = list.get(at) {
                            let m = &moves[k as usize];
                            if m.a as usize != a || m.c as usize != c {
                                break;
                            }
                            push_merged_from(psegs, seg_begin, Segment { src_buf: Buf::Input, src_off: m.input_off, dst_buf: Buf::Scratch, dst_off: m.scratch_off, len: m.len });
                            bal_out[src] += m.len;
                            bal_in[dst] += m.len;
                            at += 1;
                        }
                        if class > 0 {
                            merge_unique(urgent_from.get(src), urgent_into.get(dst), pdeps);
                        }
                        let id = b.close_transfer(src as u32, dst as u32, Op::Copy, Tier::ScaleUp, 0, seg_begin, dep_begin);
                        bal_id[(src * g + c) * classes + class] = id;
                        if class == 0 {
                            urgent_from.push(src, id);
                            urgent_into.push(dst, id);
                        }
                    }
                }
                server_begin = server_end;
            }
        }
        loads.balance_max = bal_out.iter().chain(bal_in.iter()).copied().max().unwrap_or(0);
        for r in 0..p {
            b.need_scratch(r as u32, bal.balance_in[r]);
        }

        // Intra-server part: beside the first scale-out round (step 1), or step 0 if there is none.
        refill(intra_load, p, 0);
        for blk in bal.intra() {
            // One rank: blocks between two other GPUs are not its rows (nor its deps).
            if only_rank.is_some_and(|r| r != blk.i as usize && r != blk.j as usize) {
                continue;
            }
            let seg = Segment { src_buf: Buf::Input, src_off: blk.input_off, dst_buf: Buf::Output, dst_off: blk.out_off, len: blk.len };
            deps.clear();
            if blk.i != blk.j {
                // Scale-up ports serve the first round's balancing first.
                merge_unique(urgent_from.get(blk.i as usize), urgent_into.get(blk.j as usize), deps);
            }
            b.transfer(blk.i, blk.j, Op::Copy, cluster.tier(blk.i, blk.j), intra_step, &[seg], deps);
            if blk.i != blk.j {
                intra_load[blk.i as usize] += blk.len;
                intra_load[blk.j as usize] += blk.len;
            }
        }
        loads.intra_max = intra_load.iter().copied().max().unwrap_or(0);
        crate::timeline::mark("balancing and intra-server transfers written");
    };
    write_balancing_and_intra();
    crate::timeline::mark("cut pass");
    // A NIC's transfers in one round: two per carrier on it, per pair its server is in.
    let pairs_per_server = if chain_nics { max_pairs_per_server(rounds, n) } else { 0 };
    let nic_cap = 2 * g.div_ceil(nics) * pairs_per_server;
    let focus = focus.map(|(x, i)| Focus { x, i, lane: i % nics, lane_busy: &cuts.lane_busy });
    let cx = RoundCtx { bal, rounds, cuts: &cuts.cuts, bal_id, tile_class, classes, nics, chain_nics, focus };
    rounds_state.reset(Some(&bal.balance_in), p, g, n * nics, nic_cap);
    write_rounds(&cx, rounds_state, &mut b, 0..rounds.len());
    crate::timeline::mark("scale-out rounds written");
    loads.round_nic_max = std::mem::take(&mut rounds_state.round_nic_max);
    loads.last_redistribution_max = rounds_state.last_redistribution_max;
    for (r, &bytes) in rounds_state.recv_cursor.iter().enumerate() {
        b.need_scratch(r as u32, bytes);
    }
    (b, loads)
}

/// Scale-out state carried from round to round.
#[derive(Default)]
struct RoundState {
    /// Per rank, where the next bytes parked in its Scratch go.
    recv_cursor: Vec<u64>,
    /// Per NIC, its transfers in the last round it sent / received in.
    sends: RoundLists,
    recvs: RoundLists,
    /// Per NIC, bytes sent / received in the round being written.
    nic_send_bytes: Vec<u64>,
    nic_recv_bytes: Vec<u64>,
    redistributor: Redistributor,
    /// Loads for the predictor (see `Loads`).
    round_nic_max: Vec<u64>,
    last_redistribution_max: u64,
    /// Per NIC, 1 + the round in which it last sent / received (until its round is closed).
    send_busy: Vec<u32>,
    recv_busy: Vec<u32>,
}

impl RoundState {
    /// Empty state; receive cursors from `cursor` (each rank's balanced-in bytes) or 0.
    fn reset(&mut self, cursor: Option<&[u64]>, ranks: usize, gpus: usize, nic_keys: usize, nic_cap: usize) {
        match cursor {
            Some(c) => {
                self.recv_cursor.clear();
                self.recv_cursor.extend_from_slice(c);
            }
            None => refill(&mut self.recv_cursor, ranks, 0),
        }
        self.sends.reset(nic_keys, nic_cap);
        self.recvs.reset(nic_keys, nic_cap);
        refill(&mut self.nic_send_bytes, nic_keys, 0);
        refill(&mut self.nic_recv_bytes, nic_keys, 0);
        refill(&mut self.send_busy, nic_keys, 0);
        refill(&mut self.recv_busy, nic_keys, 0);
        self.redistributor.reset(ranks, gpus);
        self.round_nic_max.clear();
        self.last_redistribution_max = 0;
    }
}

/// What the scale-out rounds read.
struct RoundCtx<'a> {
    bal: &'a Balanced,
    rounds: &'a [Round],
    cuts: &'a [Cut],
    /// Per (balancing sender, carrier, class), the balancing transfer's id.
    bal_id: &'a [u32],
    tile_class: &'a [u8],
    classes: usize,
    nics: usize,
    chain_nics: bool,
    /// One rank's expansion: only the visits and carriers it takes part in.
    focus: Option<Focus<'a>>,
}

/// Write the scale-out transfers of rounds `range` (from the first round) and their redistribution.
fn write_rounds(cx: &RoundCtx, st: &mut RoundState, b: &mut PlanBuilder, range: std::ops::Range<usize>) {
    let RoundCtx { bal, rounds, cuts, bal_id, tile_class, classes, nics, chain_nics, focus } = *cx;
    let RoundState { recv_cursor, sends, recvs, nic_send_bytes, nic_recv_bytes, redistributor, round_nic_max, last_redistribution_max, send_busy, recv_busy } = st;
    let (n, g) = (bal.servers, bal.gpus);
    let mut visit = 0;
    for k in range {
        let round = &rounds[k];
        let step = k as u32 + 1;
        // The predictor needs the redistribution loads of the last round only.
        let last_round = k + 1 == rounds.len();
        redistributor.track_loads(last_round);
        let busy_mark = k as u32 + 1;
        for &(s, d, _) in &round.pairs {
            let (s, d) = (s as usize, d as usize);
            let tile = s * n + d;
            let v = visit;
            visit += 1;
            // Which NICs send and receive in this round: a NIC's chain moves on to this
            // round only if it does (read from the cuts, so one rank's expansion, which
            // writes few of the round's transfers, sees the same).
            // One rank needs every visit's marks only for its own NIC index (the chains its
            // transfers' deps come from); elsewhere only where it writes.
            let involved = focus.is_none_or(|f| s == f.x || d == f.x);
            if chain_nics {
                match focus {
                    // One rank has no cuts where it has no part: who moves on its NIC index.
                    Some(f) if !involved => {
                        if f.lane_busy[v] {
                            send_busy[s * nics + f.lane] = busy_mark;
                            recv_busy[d * nics + f.lane] = busy_mark;
                        }
                    }
                    _ => {
                        for c in 0..g {
                            if cuts[v * g + c].bytes > 0 {
                                send_busy[s * nics + c % nics] = busy_mark;
                                recv_busy[d * nics + c % nics] = busy_mark;
                            }
                        }
                    }
                }
            }
            // One rank writes its own carrier's cut where its server sends, every carrier's
            // where it receives (the redistribution into it), nothing elsewhere. Where it
            // sends, it neither knows nor needs the receiver's Scratch offsets (a rank plan
            // keeps only the sender's side) nor parks for the redistribution there; where it
            // receives, the sender's balancing is not its own.
            let (carriers, sender_is_ours, receiver_is_ours) = match focus {
                None => (0..g, true, true),
                Some(f) if d == f.x => (0..g, false, true),
                Some(f) if s == f.x => (f.i..f.i + 1, true, false),
                Some(_) => continue,
            };
            for c in carriers {
                let cut = cuts[v * g + c];
                let mut x = cut.bytes;
                if x == 0 {
                    continue;
                }
                let src_rank = s * g + c;
                let dst_rank = d * g + c;
                let snic = s * nics + c % nics;
                let rnic = d * nics + c % nics;
                let cur = &mut (cut.at, cut.off);
                // One rank receiving at another carrier of its server: that carrier's scale-out
                // transfer and its redistribution to other owners are not the rank's, only
                // the redistribution into the rank is (`light_carrier`).
                if let Some(f) = focus.filter(|f| d == f.x && c != f.i) {
                    light_carrier(bal, cur, x, c, f.i, &mut recv_cursor[dst_rank], redistributor, b, dst_rank as u32, (d * g) as u32, step + 1);
                    continue;
                }
                // Two transfers at most: the carrier's own bytes (free to start at once) and
                // the balanced-in bytes (after the balancing transfers that bring them). The
                // stream holds own pieces first, so one pass splits it.
                for own_phase in [true, false] {
                    // Segments and deps go straight into the plan's arrays.
                    let (psegs, pdeps) = b.lists_mut();
                    let (seg_begin, dep_begin) = (psegs.len(), pdeps.len());
                    let mut bytes = 0u64;
                    while x > 0 {
                        let piece = *bal.piece(cur.0);
                        let in_scratch = piece.a as usize != c;
                        if own_phase && in_scratch {
                            break;
                        }
                        let y = (piece.len - cur.1).min(x);
                        let a = piece.a as usize;
                        let j = piece.j as usize;
                        let src_buf = if in_scratch {
                            if sender_is_ours {
                                let dep = bal_id[((s * g + a) * g + c) * classes + tile_class[tile] as usize];
                                if pdeps.len() == dep_begin || pdeps.last() != Some(&dep) {
                                    pdeps.push(dep);
                                }
                            }
                            Buf::Scratch
                        } else {
                            Buf::Input
                        };
                        let src_off = piece.src_off + cur.1;
                        let out_off = piece.out_off + cur.1;
                        if j == c {
                            push_merged_from(psegs, seg_begin, Segment { src_buf, src_off, dst_buf: Buf::Output, dst_off: out_off, len: y });
                        } else {
                            let at = recv_cursor[dst_rank];
                            recv_cursor[dst_rank] += y;
                            push_merged_from(psegs, seg_begin, Segment { src_buf, src_off, dst_buf: Buf::Scratch, dst_off: at, len: y });
                            if receiver_is_ours {
                                redistributor.park(j, at, out_off, y);
                            }
                        }
                        bytes += y;
                        x -= y;
                        cur.1 += y;
                        if cur.1 == piece.len {
                            cur.0 += 1;
                            cur.1 = 0;
                        }
                    }
                    if psegs.len() == seg_begin {
                        pdeps.truncate(dep_begin);
                        continue;
                    }
                    // Sorted deps: the balancing ones (ids below every scale-out id), then the
                    // union of the NIC lists (ascending, as filled).
                    sort_dedup_tail(pdeps, dep_begin);
                    if chain_nics {
                        merge_unique(sends.last(snic), recvs.last(rnic), pdeps);
                    }
                    let id = b.close_transfer(src_rank as u32, dst_rank as u32, Op::Copy, Tier::ScaleOut, step, seg_begin, dep_begin);
                    // Its redistribution: step k+2, beside the next round's scale-out.
                    redistributor.emit(b, dst_rank as u32, (d * g) as u32, id, step + 1);
                    nic_send_bytes[snic] += bytes;
                    nic_recv_bytes[rnic] += bytes;
                    if chain_nics {
                        sends.push_cur(snic, id);
                        recvs.push_cur(rnic, id);
                    }
                }
            }
        }
        // Every NIC this round can have touched: those of its pairs' servers (read from the
        // round, not tracked per transfer: that bookkeeping branched unpredictably). A NIC
        // seen twice (a server in two pairs) was reset after its first look; closing a
        // round twice is a no-op.
        let mut round_max = 0;
        for &(s, d, _) in &round.pairs {
            // One rank: a pair it has no part in wrote nothing; only the chains of its NIC
            // index move on (its loads are not kept).
            if let Some(f) = focus.filter(|f| s as usize != f.x && d as usize != f.x) {
                if chain_nics {
                    for nic in [s as usize * nics + f.lane, d as usize * nics + f.lane] {
                        sends.close_round(nic, send_busy[nic] == busy_mark);
                        recvs.close_round(nic, recv_busy[nic] == busy_mark);
                        send_busy[nic] = 0;
                        recv_busy[nic] = 0;
                    }
                }
                continue;
            }
            let (s_nics, d_nics) = (s as usize * nics, d as usize * nics);
            for nic in (s_nics..s_nics + nics).chain(d_nics..d_nics + nics) {
                round_max = round_max.max(nic_send_bytes[nic]).max(nic_recv_bytes[nic]);
                nic_send_bytes[nic] = 0;
                nic_recv_bytes[nic] = 0;
                if chain_nics {
                    sends.close_round(nic, send_busy[nic] == busy_mark);
                    recvs.close_round(nic, recv_busy[nic] == busy_mark);
                    // Closed once: a NIC seen again (its server in two pairs) keeps its lists.
                    send_busy[nic] = 0;
                    recv_busy[nic] = 0;
                }
            }
        }
        round_nic_max.push(round_max);
        if last_round {
            *last_redistribution_max = redistributor.finish_round();
        }
    }
}

/// One rank `owner` of the receiving server, at carrier `c` (not the rank) of a visit moving
/// `x` bytes from the cursor `cur`: only what the rank takes part in, the redistribution of
/// the rank's bytes from `c`'s Scratch, one transfer per phase as `write_rounds` writes it.
/// The carrier's own scale-out transfer and its redistribution to other owners are neither
/// written nor numbered (the rank keeps no row of them, and the deps on them it would drop).
/// Every parked piece still moves the carrier's receive cursor, so the rank's parked
/// segments merge exactly where the whole plan's do (merging compares Scratch offsets).
#[allow(clippy::too_many_arguments)]
#[inline]
fn light_carrier(bal: &Balanced, cur: &mut (u32, u64), mut x: u64, c: usize, owner: usize, cursor: &mut u64, redistributor: &mut Redistributor, b: &mut PlanBuilder, holder: u32, server_base: u32, step: u32) {
    for own_phase in [true, false] {
        let mut any = false;
        while x > 0 {
            let piece = bal.piece(cur.0);
            if own_phase && piece.a as usize != c {
                break;
            }
            any = true;
            let y = (piece.len - cur.1).min(x);
            let j = piece.j as usize;
            if j != c {
                let at = *cursor;
                *cursor += y;
                if j == owner {
                    redistributor.park(j, at, piece.out_off + cur.1, y);
                }
            }
            x -= y;
            cur.1 += y;
            if cur.1 == piece.len {
                cur.0 += 1;
                cur.1 = 0;
            }
        }
        if any {
            // The producer is not the rank's: a dep the rank plan drops.
            redistributor.emit(b, holder, server_base, u32::MAX, step);
        }
    }
}

/// The scale-out transfers `assemble_with` writes, in plan order, without writing them:
/// `each(round, sending NIC, receiving NIC, bytes)` (global NIC ids) for every carrier's
/// share of every pair of every round, split as the assembler splits it — the carrier's
/// own bytes (its stream's leading pieces) first, then its balanced-in bytes, each a
/// transfer when non-empty. With `chain_nics` a transfer of round k depends on every
/// transfer of the previous round in which its sending NIC sent and of the previous round
/// in which its receiving NIC received (and balanced-in bytes on balancing transfers).
/// Costs the cut pass and one look at each stream's own pieces: a fraction of assembly.
pub(crate) fn for_each_scaleout_transfer(cluster: &Cluster, bal: &Balanced, rounds: &[Round], mut each: impl FnMut(usize, usize, usize, u64)) {
    let (n, g) = (bal.servers, bal.gpus);
    let nics = cluster.nics_per_server as usize;
    {
        let mut cuts = Cuts::default();
        cuts.make(bal, rounds);
        // Per stream: its own bytes not yet sent (a carrier's own pieces lead its stream).
        let mut own_left: Vec<u64> = Vec::new();
        own_left.extend(bal.stream_range.iter().enumerate().map(|(k, &(b, e))| {
            bal.pieces_in(b, e).iter().take_while(|p| p.a as usize == k % g).map(|p| p.len).sum::<u64>()
        }));
        let mut visit = 0;
        for (k, round) in rounds.iter().enumerate() {
            for &(s, d, _) in &round.pairs {
                let (s, d) = (s as usize, d as usize);
                for c in 0..g {
                    let x = cuts.cuts[visit * g + c].bytes;
                    if x == 0 {
                        continue;
                    }
                    let left = &mut own_left[(s * n + d) * g + c];
                    let own = (*left).min(x);
                    *left -= own;
                    let (snic, rnic) = (s * nics + c % nics, d * nics + c % nics);
                    for bytes in [own, x - own] {
                        if bytes > 0 {
                            each(k, snic, rnic, bytes);
                        }
                    }
                }
                visit += 1;
            }
        }
    }
}

/// The most pairs any server sends or receives in one round (1 for one-to-one rounds).
fn max_pairs_per_server(rounds: &[Round], n: usize) -> usize {
    // Per sending / receiving server: its pairs in the round last seen (`seen` = round + 1),
    // so no count is cleared per round.
    let (mut count, mut seen) = (vec![0usize; 2 * n], vec![0usize; 2 * n]);
    let mut max = 0;
    for (k, round) in rounds.iter().enumerate() {
        for &(s, d, _) in &round.pairs {
            for x in [s as usize, n + d as usize] {
                if seen[x] != k + 1 {
                    seen[x] = k + 1;
                    count[x] = 0;
                }
                count[x] += 1;
                max = max.max(count[x]);
            }
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sorted_unique(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v.dedup();
        v
    }

    #[test]
    fn pairs_per_server_count_within_each_round() {
        let round = |pairs: &[(u32, u32)]| Round { pairs: pairs.iter().map(|&(s, d)| (s, d, 1)).collect() };
        // Server 0 sends to two servers in round 0; every later round is one-to-one.
        let rounds = [round(&[(0, 1), (0, 2), (1, 0)]), round(&[(2, 0)]), round(&[(0, 1), (1, 2)])];
        assert_eq!(max_pairs_per_server(&rounds, 3), 2);
        // Counts start again in each round (server 0 sends in all three, once each)...
        assert_eq!(max_pairs_per_server(&[round(&[(0, 1)]), round(&[(0, 2)]), round(&[(0, 1)])], 3), 1);
        // ...receivers are counted apart from senders, and no rounds give 0.
        assert_eq!(max_pairs_per_server(&[round(&[(0, 2), (1, 2), (2, 0)])], 3), 2);
        assert_eq!(max_pairs_per_server(&[], 3), 0);
    }

    proptest! {
        #[test]
        fn merge_unique_is_the_sorted_union(a in proptest::collection::btree_set(0u32..40, 0..8), b in proptest::collection::btree_set(0u32..40, 0..8), prefix in proptest::collection::vec(0u32..9, 0..3)) {
            let (a, b): (Vec<u32>, Vec<u32>) = (a.into_iter().collect(), b.into_iter().collect());
            let mut out = prefix.clone();
            merge_unique(&a, &b, &mut out);
            prop_assert_eq!(&out[..prefix.len()], &prefix[..]);
            prop_assert_eq!(out[prefix.len()..].to_vec(), sorted_unique([a, b].concat()));
        }

        #[test]
        fn sort_dedup_tail_leaves_the_head(head in proptest::collection::vec(0u32..50, 0..4), tail in proptest::collection::vec(0u32..50, 0..10)) {
            let mut v = [head.clone(), tail.clone()].concat();
            sort_dedup_tail(&mut v, head.len());
            prop_assert_eq!(&v[..head.len()], &head[..]);
            prop_assert_eq!(v[head.len()..].to_vec(), sorted_unique(tail));
        }
    }
}
