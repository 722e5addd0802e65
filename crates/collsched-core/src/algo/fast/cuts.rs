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
    /// Filled by `make_counted` only (else empty), per `visit * g + c`: what the assembler
    /// makes of the cut. One array: the cuts are written in tile order, far apart, so each
    /// array written costs a cache miss per cut.
    pub tally: Vec<CutTally>,
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
        self.make_inner(bal, rounds, false);
    }

    /// `make`, also counting what the assembler writes per cut (`tally`): the prefix sums
    /// of their `count`s are the global ids of the scale-out transfers, which lets one
    /// rank's expansion write only its own. Needs `bal.gpus <= MAX_COUNTED_GPUS`.
    pub fn make_counted(&mut self, bal: &Balanced, rounds: &[Round]) {
        assert!(bal.gpus <= MAX_COUNTED_GPUS, "make_counted: {} GPUs per server", bal.gpus);
        self.make_inner(bal, rounds, true);
    }

    fn make_inner(&mut self, bal: &Balanced, rounds: &[Round], count: bool) {
        let (n, g) = (bal.servers, bal.gpus);
        let Cuts { visits: vs, cuts, tally } = self;
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
        refill(cuts, visits * g, Cut::default());
        if count {
            refill(tally, visits * g, CutTally::default());
        } else {
            tally.clear();
        }
        let mut carriers = Vec::with_capacity(g);
        for tile in 0..n * n {
            cut_tile(bal, vs, tile, &mut carriers, cuts, if count { Some(&mut tally[..]) } else { None });
        }
    }
}

/// Cut every visit of `tile`. A tile's carriers send, after each visit, their target's
/// share of the tile bytes sent so far (`mul_div(cum, target, total)`), so every carrier
/// finishes with the tile's last visit. With `tally`, also count what each cut becomes
/// (see `Cuts::tally`).
fn cut_tile(bal: &Balanced, vs: &Visits, tile: usize, carriers: &mut Vec<(u32, u64, u64)>, cuts: &mut [Cut], mut tally: Option<&mut [CutTally]>) {
    let g = bal.gpus;
    let (vb, ve) = (vs.first[tile] as usize, vs.first[tile + 1] as usize);
    if vb == ve {
        return;
    }
    let total = bal.server[tile];
    // Per carrier: next piece, offset in it, bytes sent so far.
    carriers.clear();
    carriers.extend((0..g).map(|c| (bal.stream_range[tile * g + c].0, 0u64, 0u64)));
    let targets = &bal.targets[tile * g..(tile + 1) * g];
    let mut cum = 0u64;
    // Visit by visit, so each visit's g cuts are written together.
    for &v in &vs.order[vb..ve] {
        let v = v as usize;
        cum += vs.bytes[v];
        for (c, (&t, (at, off, given))) in targets.iter().zip(carriers.iter_mut()).enumerate() {
            let hi = if cum == total { t } else { mul_div(cum, t, total) };
            let mut x = hi - *given;
            *given = hi;
            let (start, start_off) = (*at, *off);
            let bytes = x;
            // What the assembler splits this cut into: own bytes (the stream's leading
            // pieces, sent from the Input), balanced-in bytes, and per phase the owners
            // other than c that it parks bytes for (one redistribution transfer each).
            let (mut own, mut own_owners, mut in_owners, mut parked) = (0u64, 0u64, 0u64, 0u64);
            while x > 0 {
                let pc = bal.piece(*at);
                let len = pc.len;
                let y = (len - *off).min(x);
                if tally.is_some() {
                    let bit = if pc.j as usize == c { 0 } else { 1u64 << pc.j };
                    if bit != 0 {
                        parked += y;
                    }
                    if pc.a as usize == c {
                        own += y;
                        own_owners |= bit;
                    } else {
                        in_owners |= bit;
                    }
                }
                x -= y;
                *off += y;
                if *off == len {
                    *at += 1;
                    *off = 0;
                }
            }
            cuts[v * g + c] = Cut { at: start, off: start_off, bytes };
            if let Some(t) = tally.as_mut() {
                let count = u32::from(own > 0) + own_owners.count_ones() + u32::from(bytes > own) + in_owners.count_ones();
                t[v * g + c] = CutTally { owners: own_owners | in_owners, parked, count };
            }
        }
    }
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
    }
}
