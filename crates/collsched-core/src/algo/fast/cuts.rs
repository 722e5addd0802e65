//! The cut pass of FAST's assembly: where each carrier's bytes of each visit of its tile
//! start in its piece stream, and how many it moves. A visit is one pair of one round,
//! numbered in round order. The pass walks each tile's streams front to back, tile after
//! tile: walking them round by round instead jumps between tiles and waits on memory at
//! every visit.
//!
//! Tiles are independent, so one or two threads can share a pass (`CutPass::share`): each
//! claims blocks of tiles until none is left, and the cuts are the same whoever made them.
use super::balance::{refill, Balanced};
use super::pipeline::Round;
use crate::reuse::vec_bytes;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Visits grouped by tile (filled by `CutPass::new`, read by the pass).
#[derive(Default)]
pub struct Visits {
    /// Per visit: the tile bytes it moves.
    bytes: Vec<u64>,
    /// Visits of tile t: `order[first[t]..first[t + 1]]`, in round order.
    first: Vec<u32>,
    order: Vec<u32>,
    fill: Vec<u32>,
}

impl Visits {
    pub fn footprint(&self) -> usize {
        vec_bytes(&self.bytes) + vec_bytes(&self.first) + vec_bytes(&self.order) + vec_bytes(&self.fill)
    }
}

/// What one carrier moves in one visit of its tile: `bytes` from piece `at` (a piece id of
/// `Balanced`), `off` bytes into it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cut {
    pub at: u32,
    pub off: u64,
    pub bytes: u64,
}

/// The pass's results, kept between calls for their allocations.
#[derive(Default)]
pub struct Cuts {
    pub visits: Visits,
    /// `cuts[visit * g + c]`: carrier c's cut of the visit.
    pub cuts: Vec<Cut>,
    /// Per visit, the work of writing it (`pipeline::split_round`): per carrier with bytes,
    /// one plus the pieces its cut spans. Summed where the cuts are made: a pass over every
    /// cut afterwards cost 1.1 ms at 1024 GPUs.
    pub work: Vec<u64>,
}

impl Cuts {
    pub fn footprint(&self) -> usize {
        self.visits.footprint() + vec_bytes(&self.cuts) + vec_bytes(&self.work)
    }

    /// Cut every visit of `rounds` on this thread.
    pub fn make(&mut self, bal: &Balanced, rounds: &[Round]) {
        CutPass::new(self, bal, rounds).run_all();
    }
}

/// One cut pass in progress: the grouped visits and the output arrays, written through
/// pointers by whichever thread claims a tile. `finish` sets the arrays' lengths (without
/// it they stay empty).
pub struct CutPass<'a> {
    bal: &'a Balanced,
    visits: &'a Visits,
    cuts: *mut Cut,
    work: *mut u64,
    /// Where the arrays' lengths are set when the pass ends.
    lens: (&'a mut Vec<Cut>, &'a mut Vec<u64>),
    count: usize,
    /// The next tile no thread has claimed.
    next_tile: AtomicUsize,
    tiles: usize,
}

// SAFETY: threads sharing a pass write only the `cuts` and `work` slots of the visits of
// tiles they claimed, and each tile is claimed once (`next_tile.fetch_add`); every visit
// belongs to one tile. `bal` and `visits` are only read.
unsafe impl Sync for CutPass<'_> {}

/// Tiles claimed at a time: a source server's row of tiles.
fn claim_block(servers: usize) -> usize {
    servers.max(1)
}

impl<'a> CutPass<'a> {
    /// Group the visits of `rounds` by tile (a counting sort) and size `out` for them.
    pub fn new(out: &'a mut Cuts, bal: &'a Balanced, rounds: &[Round]) -> CutPass<'a> {
        let (n, g) = (bal.servers, bal.gpus);
        let Cuts { visits: vs, cuts, work } = out;
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
        let count = vs.bytes.len();
        refill(&mut vs.order, count, 0);
        let mut v = 0u32;
        for round in rounds {
            for &(s, d, _) in &round.pairs {
                let t = s as usize * n + d as usize;
                vs.order[vs.fill[t] as usize] = v;
                vs.fill[t] += 1;
                v += 1;
            }
        }
        // Every slot is written once by the pass (each visit is in exactly one tile), so
        // the arrays are not initialised first (a 10 MB fill at 1024 GPUs).
        cuts.clear();
        cuts.reserve(count * g);
        work.clear();
        work.reserve(count);
        let (cuts_ptr, work_ptr) = (cuts.as_mut_ptr(), work.as_mut_ptr());
        CutPass { bal, visits: vs, cuts: cuts_ptr, work: work_ptr, lens: (cuts, work), count, next_tile: AtomicUsize::new(0), tiles: n * n }
    }

    /// Cut tiles claimed from the pass until none is left. Any number of threads may call
    /// this at once; it never waits for another.
    pub fn share(&self) {
        let block = claim_block(self.bal.servers);
        let mut carriers = Vec::with_capacity(self.bal.gpus);
        loop {
            let begin = self.next_tile.fetch_add(block, Ordering::Relaxed);
            if begin >= self.tiles {
                return;
            }
            for tile in begin..(begin + block).min(self.tiles) {
                self.cut_tile(tile, &mut carriers);
            }
        }
    }

    fn run_all(mut self) {
        self.share();
        self.finish();
    }

    /// Every tile has been cut (each thread that shared the pass has returned from
    /// `share`): the arrays hold every visit's cuts.
    pub fn finish(&mut self) {
        assert!(self.next_tile.load(Ordering::Relaxed) >= self.tiles, "cut pass finished before every tile was claimed");
        // SAFETY: every tile was claimed, and the claiming `share` calls have returned, so
        // every slot below `count` (× g) has been written (see `CutPass::new`); capacity
        // was reserved for them.
        unsafe {
            self.lens.0.set_len(self.count * self.bal.gpus);
            self.lens.1.set_len(self.count);
        }
    }

    /// Cut every visit of `tile`. A tile's carriers send, after each visit, their target's
    /// share of the tile bytes sent so far (`mul_div(cum, target, total)`), so every
    /// carrier finishes with the tile's last visit.
    fn cut_tile(&self, tile: usize, carriers: &mut Vec<(u32, u64, u64)>) {
        let (bal, vs, g) = (self.bal, self.visits, self.bal.gpus);
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
            let mut work = 0;
            for (c, (&t, (at, off, given))) in targets.iter().zip(carriers.iter_mut()).enumerate() {
                let hi = if cum == total { t } else { mul_div(cum, t, total) };
                let mut x = hi - *given;
                *given = hi;
                let (start, start_off) = (*at, *off);
                let bytes = x;
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
                if bytes > 0 {
                    work += 1 + (*at - start) as u64 + u64::from(*off > 0);
                }
                // SAFETY: v < count and c < g: inside the reserved capacity; this thread
                // claimed v's tile (see the `Sync` impl).
                unsafe { self.cuts.add(v * g + c).write(Cut { at: start, off: start_off, bytes }) };
            }
            // SAFETY: as above.
            unsafe { self.work.add(v).write(work) };
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
        /// Two threads sharing a pass (claiming tiles as they race) make the cuts and the
        /// work one thread makes.
        #[test]
        fn a_shared_pass_makes_the_cuts_of_one_thread(servers in 1u32..9, gpus in 1u32..5, skew in 0usize..2, seed in 0u64..1000) {
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
            prop_assert_eq!(one.work.len(), visits);
            let mut two = Cuts::default();
            let mut pass = CutPass::new(&mut two, &bal, &rounds);
            std::thread::scope(|scope| {
                let shared = &pass;
                scope.spawn(move || shared.share());
                shared.share();
            });
            pass.finish();
            prop_assert_eq!(&two.cuts, &one.cuts);
            prop_assert_eq!(&two.work, &one.work);
            // Every carrier of every tile is cut to its target over the tile's visits.
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

    #[test]
    #[should_panic(expected = "before every tile was claimed")]
    fn finishing_an_unrun_pass_panics() {
        let cluster = Cluster::parse("h200:2,gpus=2").unwrap();
        let t = generators::uniform(4, 1 << 20, 1).unwrap();
        let bal = super::super::balance::balance(&t, &cluster);
        let rounds = vec![Round { pairs: vec![(0, 1, bal.server[1]), (1, 0, bal.server[2])] }];
        let mut cuts = Cuts::default();
        CutPass::new(&mut cuts, &bal, &rounds).finish();
    }
}
