//! The cut pass of FAST's assembly: where each carrier's bytes of each visit of its tile
//! start in its piece stream, and how many it moves. A visit is one pair of one round,
//! numbered in round order. The pass walks each tile's streams front to back, tile after
//! tile: walking them round by round instead jumps between tiles and waits on memory at
//! every visit.
use super::balance::{refill, Balanced};
use super::pipeline::Round;

/// Visits grouped by tile (filled by `Cuts::make`, read by the pass).
#[derive(Default)]
pub struct Visits {
    /// Per visit: the tile bytes it moves.
    bytes: Vec<u64>,
    /// Visits of tile t: `order[first[t]..first[t + 1]]`, in round order.
    first: Vec<u32>,
    order: Vec<u32>,
    fill: Vec<u32>,
}

/// What one carrier moves in one visit of its tile: `bytes` from piece `at` (a piece id of
/// `Balanced`), `off` bytes into it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cut {
    pub at: u32,
    pub off: u64,
    pub bytes: u64,
}

/// The pass's results; the caller may keep it between calls for its allocations.
#[derive(Default)]
pub struct Cuts {
    pub visits: Visits,
    /// `cuts[visit * g + c]`: carrier c's cut of the visit.
    pub cuts: Vec<Cut>,
    /// Filled by `make_counted` only, per `visit * g + c`: what the assembler makes of the
    /// cut, for the visits of the tiles the rank's server sends or receives.
    pub tally: Vec<CutTally>,
    /// Filled by `make_counted` only, per visit: its cuts' counts summed (see `VisitCount`).
    pub visit: Vec<VisitCount>,
    /// Filled by `make_counted` only where a round has two visits into one server, per
    /// `visit * g + c`: `CutTally::owners` (their union is what the round redistributes).
    pub owners: Vec<u64>,
}

/// One visit's cuts, counted (`Cuts::make_counted`): what the ids, the moving pairs and
/// the receive offsets of the other ranks' transfers need, in one small record per visit
/// rather than per cut (the visits of a tile lie far apart, so every record written costs a
/// cache miss).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VisitCount {
    /// Transfers its cuts become (`CutTally::count` summed).
    pub count: u32,
    /// Owners its cuts park bytes for, counted per cut (`CutTally::owners`' sizes summed):
    /// the redistribution pairs it adds where its round has no other visit into its server.
    pub owner_pairs: u32,
    /// Bit c: carrier c's cut moves bytes.
    pub busy: u64,
    /// Bytes the cut of the rank's own carrier index parks at the receiver.
    pub parked: u64,
}

/// What the assembler makes of one cut (`Cuts::make_counted`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutTally {
    /// Which local owners other than the carrier it parks bytes for (bit j)...
    pub owners: u64,
    /// ...how many bytes it parks in the receiving carrier's Scratch (those owners')...
    pub parked: u64,
    /// ...and how many transfers it becomes: its own-bytes and balanced-in scale-out
    /// transfers, each followed by one redistribution transfer per other owner it parks
    /// bytes for.
    pub count: u32,
}

/// Local GPUs per server up to which `make_counted` can count (owner sets are bit masks).
pub const MAX_COUNTED_GPUS: usize = 64;

impl Cuts {
    /// Cut every visit of `rounds`: group the visits by tile (a counting sort), then cut
    /// each tile's visits in round order.
    pub fn make(&mut self, bal: &Balanced, rounds: &[Round]) {
        assert!(bal.pieces_of.is_none(), "make: every tile's pieces");
        self.make_inner(bal, rounds, None);
    }

    /// `make` for `rank`, also counting what the assembler writes per cut
    /// (`tally`): the prefix sums of their `count`s are the global ids of the scale-out
    /// transfers, which lets one rank's expansion write only its own. The counts come from
    /// the streams' summaries (no walk over pieces). The cuts (`cuts`) and their tallies
    /// (`tally`) are written only for the visits of the tiles the rank's server `x` sends or
    /// receives, the only ones its expansion writes (the other entries are left as they
    /// were); every visit gets its `VisitCount`, and `owners` is filled where rounds are
    /// not one-to-one (`receivers_unique`). Needs `bal.gpus <= MAX_COUNTED_GPUS`.
    pub fn make_counted(&mut self, bal: &Balanced, rounds: &[Round], rank: usize) {
        assert!(bal.gpus <= MAX_COUNTED_GPUS, "make_counted: {} GPUs per server", bal.gpus);
        let x = rank / bal.gpus;
        assert!(bal.pieces_of.is_none_or(|p| p == x), "make_counted: pieces balanced for server {:?}, not {x}", bal.pieces_of);
        assert!(bal.summarized, "make_counted: balanced without the streams' summaries");
        self.make_inner(bal, rounds, Some(rank));
    }

    fn make_inner(&mut self, bal: &Balanced, rounds: &[Round], counted_for: Option<usize>) {
        let (n, g) = (bal.servers, bal.gpus);
        let Cuts { visits: vs, cuts, tally, visit, owners } = self;
        vs.bytes.clear();
        refill(&mut vs.first, n * n + 1, 0);
        for round in rounds {
            for &(s, d, r) in &round.pairs {
                vs.bytes.push(r);
                vs.first[(s as usize * n + d as usize) + 1] += 1;
            }
        }
        for t in 0..n * n {
            vs.first[t + 1] += vs.first[t];
        }
        vs.fill.clear();
        vs.fill.extend_from_slice(&vs.first[..n * n]);
        refill(&mut vs.order, vs.bytes.len(), 0);
        let mut v = 0u32;
        for round in rounds {
            for &(s, d, _) in &round.pairs {
                let t = s as usize * n + d as usize;
                vs.order[vs.fill[t] as usize] = v;
                vs.fill[t] += 1;
                v += 1;
            }
        }
        let visits = vs.bytes.len();
        let (mut carriers, mut given) = (Vec::with_capacity(g), Vec::with_capacity(g));
        let Some(rank) = counted_for else {
            refill(cuts, visits * g, Cut::default());
            tally.clear();
            owners.clear();
            visit.clear();
            for tile in 0..n * n {
                cut_tile(bal, vs, tile, &mut carriers, &mut given, cuts);
            }
            return;
        };
        // Only the rank's server's visits are written: no need to clear the rest.
        cuts.resize(visits * g, Cut::default());
        tally.resize(visits * g, CutTally::default());
        refill(visit, visits, VisitCount::default());
        let unique = receivers_unique(rounds, n);
        if unique {
            owners.clear();
        } else {
            refill(owners, visits * g, 0);
        }
        let (x, i) = (rank / g, rank % g);
        let mut walkers = Vec::with_capacity(g);
        for tile in 0..n * n {
            let involved = tile / n == x || tile % n == x;
            if involved {
                cut_tile(bal, vs, tile, &mut carriers, &mut given, cuts);
            }
            let out = CountOut { visit, tally: if involved { Some(&mut tally[..]) } else { None }, owners: if unique { None } else { Some(&mut owners[..]) }, i };
            count_tile(bal, vs, tile, &mut walkers, &mut given, out);
        }
    }
}

/// The bytes each carrier of `tile` has sent after each visit: its target's share of the
/// tile bytes sent so far (`mul_div(cum, target, total)`), so every carrier finishes with
/// the tile's last visit. Calls `each(visit, carrier, bytes before, bytes after)` visit by
/// visit, so each visit's g cuts are written together. `given`: working memory.
#[inline(always)]
fn for_each_cut(bal: &Balanced, vs: &Visits, tile: usize, given: &mut Vec<u64>, mut each: impl FnMut(usize, usize, u64, u64)) {
    let g = bal.gpus;
    let (vb, ve) = (vs.first[tile] as usize, vs.first[tile + 1] as usize);
    let total = bal.server[tile];
    let targets = &bal.targets[tile * g..(tile + 1) * g];
    refill(given, g, 0);
    let mut cum = 0u64;
    for &v in &vs.order[vb..ve] {
        let v = v as usize;
        cum += vs.bytes[v];
        for (c, (&t, lo)) in targets.iter().zip(given.iter_mut()).enumerate() {
            let hi = if cum == total { t } else { mul_div(cum, t, total) };
            each(v, c, *lo, hi);
            *lo = hi;
        }
    }
}

/// Cut every visit of `tile` (`for_each_cut`): where each cut starts in its carrier's
/// stream, walking the pieces.
fn cut_tile(bal: &Balanced, vs: &Visits, tile: usize, carriers: &mut Vec<(u32, u64)>, given: &mut Vec<u64>, cuts: &mut [Cut]) {
    let g = bal.gpus;
    if vs.first[tile] == vs.first[tile + 1] {
        return;
    }
    // Per carrier: next piece, offset in it.
    carriers.clear();
    carriers.extend((0..g).map(|c| (bal.stream_range[tile * g + c].0, 0u64)));
    for_each_cut(bal, vs, tile, given, |v, c, lo, hi| {
        let (at, off) = &mut carriers[c];
        let bytes = hi - lo;
        let (start, start_off) = (*at, *off);
        let mut x = bytes;
        while x > 0 {
            let len = bal.piece(*at).len;
            let y = (len - *off).min(x);
            x -= y;
            *off += y;
            if *off == len {
                *at += 1;
                *off = 0;
            }
        }
        cuts[v * g + c] = Cut { at: start, off: start_off, bytes };
    });
}

/// Whether no round has two visits into one server (then a visit's owners are its
/// round's for its receiving server, and need no union).
pub fn receivers_unique(rounds: &[Round], n: usize) -> bool {
    let mut seen = vec![usize::MAX; n];
    for (k, round) in rounds.iter().enumerate() {
        for &(_, d, _) in &round.pairs {
            if std::mem::replace(&mut seen[d as usize], k) == k {
                return false;
            }
        }
    }
    true
}

/// Where `count_tile` writes.
struct CountOut<'a> {
    visit: &'a mut [VisitCount],
    /// Per cut, where wanted (the rank's server's tiles).
    tally: Option<&'a mut [CutTally]>,
    /// Per cut, where wanted (rounds not one-to-one).
    owners: Option<&'a mut [u64]>,
    /// The rank's carrier index (whose parked bytes `VisitCount::parked` holds).
    i: usize,
}

/// Count what each cut of `tile` becomes (`CutTally`) from the streams' summaries. A
/// stream is own non-direct bytes `0..own_nd`, own direct ones up to `own`, balanced-in
/// non-direct ones up to `nd_end`, then balanced-in direct ones: a cut's own and parked
/// bytes are overlaps with those ranges, and its owners are those of the non-direct runs
/// it overlaps (walked with one cursor per carrier, as cuts only advance).
fn count_tile(bal: &Balanced, vs: &Visits, tile: usize, walkers: &mut Vec<(u32, u64)>, given: &mut Vec<u64>, mut out: CountOut) {
    let g = bal.gpus;
    if vs.first[tile] == vs.first[tile + 1] {
        return;
    }
    let sums = &bal.summary[tile * g..(tile + 1) * g];
    // Per carrier: its next run, and where that run starts in the stream.
    walkers.clear();
    walkers.extend(sums.iter().map(|sm| (sm.runs.0, if sm.runs.0 == sm.runs.1 { sm.own } else { 0 })));
    for_each_cut(bal, vs, tile, given, |v, c, lo, hi| {
        let bytes = hi - lo;
        let e = v * g + c;
        let sm = &sums[c];
        let overlap = |b: u64, e: u64| hi.min(e).saturating_sub(lo.max(b));
        let own = overlap(0, sm.own);
        let parked = overlap(0, sm.own_nd) + overlap(sm.own, sm.nd_end);
        let (mut own_owners, mut in_owners) = (0u64, 0u64);
        let (run, start) = &mut walkers[c];
        let (_, mid, end) = sm.runs;
        while *run < end && *start < hi {
            let r = bal.run(*run);
            let stop = *start + r.len;
            if stop > lo {
                if *run < mid {
                    own_owners |= 1 << r.j;
                } else {
                    in_owners |= 1 << r.j;
                }
            }
            if stop > hi {
                break;
            }
            *run += 1;
            *start = if *run == mid { sm.own } else { stop };
        }
        let count = u32::from(own > 0) + own_owners.count_ones() + u32::from(bytes > own) + in_owners.count_ones();
        let owners = own_owners | in_owners;
        let vc = &mut out.visit[v];
        vc.count += count;
        vc.owner_pairs += owners.count_ones();
        vc.busy |= u64::from(bytes > 0) << c;
        if c == out.i {
            vc.parked = parked;
        }
        if let Some(t) = out.tally.as_deref_mut() {
            t[e] = CutTally { owners, parked, count };
        }
        if let Some(o) = out.owners.as_deref_mut() {
            o[e] = owners;
        }
    });
}

#[inline]
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    if c == 0 {
        0
    } else if let Some(ab) = a.checked_mul(b) {
        ab / c // same value as the u128 path, without a 128-bit division
    } else {
        ((a as u128 * b as u128) / c as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Options;
    use crate::traffic::generators;
    use crate::Cluster;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Every carrier of every tile is cut to its target over the tile's visits.
        #[test]
        fn every_carrier_is_cut_to_its_target(servers in 1u32..9, gpus in 1u32..5, skew in 0usize..2, seed in 0u64..1000) {
            let cluster = Cluster::parse(&format!("h200:{servers},gpus={gpus}")).unwrap();
            let p = cluster.num_gpus() as usize;
            let t = if skew == 0 { generators::uniform(p, 1 << 20, seed).unwrap() } else { generators::zipf(p, 0.99, 3 << 20, seed).unwrap() };
            let o = super::super::FastOptions::parse(&Options::new(), &cluster, "fast", &[]).unwrap();
            let bal = super::super::balance::balance(&t, &cluster);
            let rounds = super::super::schedule(&t, &bal.server, servers as usize, &cluster, &o).rounds;
            let mut one = Cuts::default();
            one.make(&bal, &rounds);
            let visits: usize = rounds.iter().map(|r| r.pairs.len()).sum();
            prop_assert_eq!(one.cuts.len(), visits * gpus as usize);
            let mut sent = vec![0u64; bal.targets.len()];
            let mut visit = 0;
            for round in &rounds {
                for &(s, d, _) in &round.pairs {
                    let tile = s as usize * bal.servers + d as usize;
                    for c in 0..bal.gpus {
                        sent[tile * bal.gpus + c] += one.cuts[visit * bal.gpus + c].bytes;
                    }
                    visit += 1;
                }
            }
            for (k, (&x, &target)) in sent.iter().zip(&bal.targets).enumerate() {
                prop_assert!(x == target || bal.server[k / bal.gpus] == 0, "carrier {} of tile {}: cut {} of {}", k % bal.gpus, k / bal.gpus, x, target);
            }
        }

        /// The counts from the streams' summaries are what a walk over the pieces of every
        /// cut gives (own bytes, parked bytes, owners), for one rank's balancing (pieces of
        /// its server's tiles only): per cut where its server sends or receives (with the
        /// cuts of `make`), per visit elsewhere.
        #[test]
        fn counted_cuts_match_a_walk_over_the_pieces(servers in 1u32..7, gpus in 1u32..6, nics in 1u32..3, skew in 0usize..3, seed in 0u64..1000, rank in 0usize..64, one_round in any::<bool>()) {
            let nics = nics.min(gpus);
            let cluster = Cluster::parse(&format!("h200:{servers},gpus={gpus},nics={nics}")).unwrap();
            let p = cluster.num_gpus() as usize;
            let t = match skew {
                0 => generators::uniform(p, 1 << 20, seed).unwrap(),
                1 => generators::zipf(p, 0.99, 3 << 20, seed).unwrap(),
                _ => generators::zipf(p, 0.8, 1000, seed).unwrap(),
            };
            let rank = rank % p;
            let (n, g) = (servers as usize, gpus as usize);
            let (x, i) = (rank / g, rank % g);
            let o = super::super::FastOptions::parse(&Options::new(), &cluster, "fast", &[]).unwrap();
            let full = super::super::balance::balance(&t, &cluster);
            let rounds = if one_round {
                // balanced_direct's single round: every pair, several visits into a server.
                let pairs: Vec<_> = (0..n * n).filter(|&k| full.server[k] > 0).map(|k| ((k / n) as u32, (k % n) as u32, full.server[k])).collect();
                if pairs.is_empty() { vec![] } else { vec![Round { pairs }] }
            } else {
                super::super::schedule(&t, &full.server, n, &cluster, &o).rounds
            };
            let mut whole = Cuts::default();
            whole.make(&full, &rounds);
            let mut one = super::super::balance::Balanced::default();
            super::super::balance::balance_for(&t, &cluster, &mut one, super::super::balance::Keep::Rank(x));
            let mut counted = Cuts::default();
            counted.make_counted(&one, &rounds, rank);
            prop_assert_eq!(counted.owners.is_empty(), receivers_unique(&rounds, n));
            let mut v = 0;
            for round in &rounds {
                for &(s, d, _) in &round.pairs {
                    let (s, d) = (s as usize, d as usize);
                    let mut want_visit = VisitCount::default();
                    for c in 0..g {
                        let cut = whole.cuts[v * g + c];
                        let (mut own, mut parked, mut own_owners, mut in_owners) = (0u64, 0u64, 0u64, 0u64);
                        let (mut at, mut off, mut left) = (cut.at, cut.off, cut.bytes);
                        while left > 0 {
                            let pc = full.piece(at);
                            let y = (pc.len - off).min(left);
                            let bit = if pc.j as usize == c { 0 } else { 1u64 << pc.j };
                            parked += if bit != 0 { y } else { 0 };
                            if pc.a as usize == c {
                                own += y;
                                own_owners |= bit;
                            } else {
                                in_owners |= bit;
                            }
                            left -= y;
                            off += y;
                            if off == pc.len {
                                at += 1;
                                off = 0;
                            }
                        }
                        let count = u32::from(own > 0) + own_owners.count_ones() + u32::from(cut.bytes > own) + in_owners.count_ones();
                        let want = CutTally { owners: own_owners | in_owners, parked, count };
                        want_visit.count += count;
                        want_visit.owner_pairs += want.owners.count_ones();
                        want_visit.busy |= u64::from(cut.bytes > 0) << c;
                        if c == i {
                            want_visit.parked = parked;
                        }
                        if !counted.owners.is_empty() {
                            prop_assert_eq!(counted.owners[v * g + c], want.owners);
                        }
                        if s == x || d == x {
                            prop_assert_eq!(counted.tally[v * g + c], want, "visit {} ({} -> {}) carrier {}", v, s, d, c);
                            // Piece ids differ (fewer pieces); the piece itself, the offset and the bytes agree.
                            let mine = counted.cuts[v * g + c];
                            prop_assert_eq!((mine.off, mine.bytes), (cut.off, cut.bytes));
                            if cut.bytes > 0 {
                                prop_assert_eq!(one.piece(mine.at), full.piece(cut.at));
                            }
                        }
                    }
                    prop_assert_eq!(counted.visit[v], want_visit, "visit {} ({} -> {})", v, s, d);
                    v += 1;
                }
            }
            prop_assert_eq!(v, counted.visit.len());
        }
    }
}
