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
    /// `cuts[visit * g + c]`: carrier c's cut of the visit (one rank's pass: only the visits
    /// of the tiles its server sends or receives).
    pub cuts: Vec<Cut>,
    /// One rank's pass (`make_rank`), per visit of a tile its server has no part in:
    /// whether a carrier on the rank's NIC index moves bytes in it.
    pub lane_busy: Vec<bool>,
    /// Per tile, the bytes of its visits so far (working memory of `make_rank`).
    sent: Vec<u64>,
}

impl Cuts {
    /// Cut every visit of `rounds`: group the visits by tile (a counting sort), then cut
    /// each tile's visits in round order.
    pub fn make(&mut self, bal: &Balanced, rounds: &[Round]) {
        assert!(bal.rank_server.is_none(), "make: every tile balanced");
        let (n, g) = (bal.servers, bal.gpus);
        self.group(bal, rounds, None);
        refill(&mut self.cuts, self.visits.bytes.len() * g, Cut::default());
        self.lane_busy.clear();
        let (mut carriers, mut given) = (Vec::with_capacity(g), Vec::with_capacity(g));
        for tile in 0..n * n {
            cut_tile(bal, &self.visits, tile, &mut carriers, &mut given, &mut self.cuts);
        }
    }

    /// `make` for `rank`'s expansion (`bal` from `balance_rank` for its server x): cuts only
    /// the visits of the tiles x sends or receives (the other cuts are left as they were);
    /// elsewhere only whether a carrier on the rank's NIC index moves bytes (`lane_busy`),
    /// from the tile totals and carrier targets alone, which is all that the NIC chains of the
    /// rank's transfers read.
    pub fn make_rank(&mut self, bal: &Balanced, rounds: &[Round], rank: usize) {
        let (n, g, nics) = (bal.servers, bal.gpus, bal.nics);
        let x = rank / g;
        assert_eq!(bal.rank_server, Some(x), "make_rank: balanced for rank {rank}'s server");
        self.group(bal, rounds, Some(x));
        let visits = self.visits.bytes.len();
        self.cuts.resize(visits * g, Cut::default());
        let (mut carriers, mut given) = (Vec::with_capacity(g), Vec::with_capacity(g));
        for tile in (0..n).map(|d| x * n + d).chain((0..n).filter(|&s| s != x).map(|s| s * n + x)) {
            cut_tile(bal, &self.visits, tile, &mut carriers, &mut given, &mut self.cuts);
        }
        // A carrier moves bytes in a visit when its share of the tile sent so far grows
        // (`for_each_cut`). Each of the `count` carriers on NIC index `lane` has a target of at
        // least ⌊total / (nics · count)⌋ (`carrier_target`), so a visit of at least twice that
        // divisor's bytes, in a tile of at least as many, gives each of them at least one byte
        // (most visits); only smaller ones need the targets.
        let lane = rank % g % nics;
        let m = (nics * (g - lane).div_ceil(nics)) as u64;
        refill(&mut self.lane_busy, visits, false);
        refill(&mut self.sent, n * n, 0);
        let mut v = 0;
        for round in rounds {
            for &(s, d, bytes) in &round.pairs {
                let (s, d) = (s as usize, d as usize);
                if s != x && d != x {
                    let tile = s * n + d;
                    let total = bal.server[tile];
                    let before = self.sent[tile];
                    self.sent[tile] += bytes;
                    self.lane_busy[v] = (bytes >= 2 * m && total >= 2 * m)
                        || (lane..g).step_by(nics).any(|c| {
                            let t = super::balance::carrier_target(total, s, d, g, nics, c);
                            mul_div(before + bytes, t, total) > mul_div(before, t, total)
                        });
                }
                v += 1;
            }
        }
    }

    /// Group the visits of `rounds` by tile (`Visits`); with `only = Some(x)`, only the
    /// visits of the tiles server x sends or receives.
    fn group(&mut self, bal: &Balanced, rounds: &[Round], only: Option<usize>) {
        let n = bal.servers;
        let wanted = |s: u32, d: u32| only.is_none_or(|x| s as usize == x || d as usize == x);
        let vs = &mut self.visits;
        vs.bytes.clear();
        refill(&mut vs.first, n * n + 1, 0);
        for round in rounds {
            for &(s, d, r) in &round.pairs {
                vs.bytes.push(r);
                if wanted(s, d) {
                    vs.first[(s as usize * n + d as usize) + 1] += 1;
                }
            }
        }
        for t in 0..n * n {
            vs.first[t + 1] += vs.first[t];
        }
        vs.fill.clear();
        vs.fill.extend_from_slice(&vs.first[..n * n]);
        refill(&mut vs.order, vs.first[n * n] as usize, 0);
        let mut v = 0u32;
        for round in rounds {
            for &(s, d, _) in &round.pairs {
                if wanted(s, d) {
                    let t = s as usize * n + d as usize;
                    vs.order[vs.fill[t] as usize] = v;
                    vs.fill[t] += 1;
                }
                v += 1;
            }
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

        /// One rank's pass (`make_rank`, over `balance_rank`'s pieces) cuts its server's tiles
        /// as the whole pass does (the same offsets, bytes and pieces but for where the pieces
        /// say they sit at the other end), and elsewhere marks exactly the carriers on its NIC
        /// index that the whole pass gives bytes. Small totals make the targets decide.
        #[test]
        fn a_ranks_cuts_are_the_whole_passs(servers in 1u32..7, gpus in 1u32..6, nics in 1u32..4, skew in 0usize..4, seed in 0u64..1000, rank in 0usize..64, exact in any::<bool>()) {
            let nics = nics.min(gpus);
            let cluster = Cluster::parse(&format!("h200:{servers},gpus={gpus},nics={nics}")).unwrap();
            let p = cluster.num_gpus() as usize;
            let t = match skew {
                0 => generators::uniform(p, 1 << 20, seed).unwrap(),
                1 => generators::zipf(p, 0.99, 3 << 20, seed).unwrap(),
                2 => generators::zipf(p, 0.8, 1000, seed).unwrap(),
                // A byte or two per pair, split over many exact stages: visits (and tiles)
                // smaller than the lane's divisor, carriers with no target.
                _ => generators::uniform(p, 1, seed).unwrap(),
            };
            let (n, g, nics) = (servers as usize, gpus as usize, nics as usize);
            let rank = rank % p;
            let x = rank / g;
            let mut opts = Options::new();
            if exact || skew == 3 {
                opts.insert("exact".into(), "1".into());
            }
            let o = super::super::FastOptions::parse(&opts, &cluster, "fast", &[]).unwrap();
            let full = super::super::balance::balance(&t, &cluster);
            let rounds = super::super::schedule(&t, &full.server, n, &cluster, &o).rounds;
            let mut whole = Cuts::default();
            whole.make(&full, &rounds);
            let mut one = super::super::balance::Balanced::default();
            super::super::balance::server_totals(&t, &cluster, &mut one);
            prop_assert_eq!(&one.server, &full.server);
            super::super::balance::balance_rank(&t, &cluster, x, &mut one);
            let mut mine = Cuts::default();
            mine.make_rank(&one, &rounds, rank);
            let lanes: Vec<usize> = (rank % g % nics..g).step_by(nics).collect();
            let mut v = 0;
            for round in &rounds {
                for &(s, d, _) in &round.pairs {
                    let (s, d) = (s as usize, d as usize);
                    for c in 0..g {
                        let (want, got) = (whole.cuts[v * g + c], mine.cuts[v * g + c]);
                        if s == x || d == x {
                            prop_assert_eq!((got.off, got.bytes), (want.off, want.bytes), "visit {} ({} -> {}) carrier {}", v, s, d, c);
                            if want.bytes > 0 {
                                let (a, b) = (one.piece(got.at), full.piece(want.at));
                                prop_assert_eq!((a.a, a.j, a.len), (b.a, b.j, b.len));
                            }
                        }
                    }
                    if s != x && d != x {
                        let busy = lanes.iter().any(|&c| whole.cuts[v * g + c].bytes > 0);
                        prop_assert_eq!(mine.lane_busy[v], busy, "visit {} ({} -> {})", v, s, d);
                    }
                    v += 1;
                }
            }
        }
    }
}
