//! Max-min fair rates by progressive filling.
//!
//! All flows grow together; the link whose fair share (residual capacity /
//! unfixed flows) is smallest saturates first and fixes its flows at that
//! share; repeat. Fixing flows only raises the fair share of the other links
//! they cross (each fixed rate is at most those links' share), so a heap whose
//! keys may be stale is still a heap of lower bounds: pop, recompute, and
//! re-push if the true share grew. Cost: O(flow-link incidences + pops·log L).
use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, PartialEq)]
struct Key(f64, u32);
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Key {
    // Reversed: BinaryHeap is a max-heap and we want the smallest share, ties by link id.
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// Reusable buffers (no allocation per recomputation once warm).
#[derive(Default)]
pub struct FairShare {
    count: Vec<u32>,
    residual: Vec<f64>,
    start: Vec<u32>,
    fill: Vec<u32>,
    entries: Vec<u32>,
    fixed: Vec<bool>,
    heap: BinaryHeap<Key>,
}

impl FairShare {
    /// Rates for the flows `active` (ids into the CSR `link_off`/`links`), written
    /// to `rates[position]`. `capacity(link, flows_on_link)` gives the usable capacity.
    pub fn compute(&mut self, active: &[u32], link_off: &[u32], links: &[u32], num_links: usize, capacity: impl Fn(usize, u32) -> f64, rates: &mut Vec<f64>) {
        let n = active.len();
        rates.clear();
        rates.resize(n, 0.0);
        self.count.clear();
        self.count.resize(num_links, 0);
        for &f in active {
            for &l in &links[link_off[f as usize] as usize..link_off[f as usize + 1] as usize] {
                self.count[l as usize] += 1;
            }
        }
        // CSR of link → positions of its active flows.
        self.start.clear();
        self.start.reserve(num_links + 1);
        let mut acc = 0u32;
        for &c in &self.count {
            self.start.push(acc);
            acc += c;
        }
        self.start.push(acc);
        self.fill.clear();
        self.fill.extend_from_slice(&self.start[..num_links]);
        self.entries.clear();
        self.entries.resize(acc as usize, 0);
        for (p, &f) in active.iter().enumerate() {
            for &l in &links[link_off[f as usize] as usize..link_off[f as usize + 1] as usize] {
                let slot = &mut self.fill[l as usize];
                self.entries[*slot as usize] = p as u32;
                *slot += 1;
            }
        }
        self.residual.clear();
        self.residual.extend((0..num_links).map(|l| capacity(l, self.count[l])));
        self.heap.clear();
        for l in 0..num_links {
            if self.count[l] > 0 {
                self.heap.push(Key(self.residual[l] / self.count[l] as f64, l as u32));
            }
        }
        self.fixed.clear();
        self.fixed.resize(n, false);
        while let Some(Key(key, l)) = self.heap.pop() {
            let li = l as usize;
            let cnt = self.count[li];
            if cnt == 0 {
                continue;
            }
            let share = (self.residual[li] / cnt as f64).max(0.0);
            if share > key {
                self.heap.push(Key(share, l));
                continue;
            }
            // Guard against a share rounded to zero: keep every rate positive so every flow ends.
            let level = share.max(capacity(li, 0) * 1e-12);
            for e in self.start[li]..self.start[li + 1] {
                let p = self.entries[e as usize] as usize;
                if self.fixed[p] {
                    continue;
                }
                self.fixed[p] = true;
                rates[p] = level;
                let f = active[p] as usize;
                for &m in &links[link_off[f] as usize..link_off[f + 1] as usize] {
                    if m != l {
                        self.residual[m as usize] -= level;
                        self.count[m as usize] -= 1;
                    }
                }
            }
            self.count[li] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(flows: &[&[u32]], caps: &[f64]) -> Vec<f64> {
        let mut off = vec![0u32];
        let mut links = Vec::new();
        for f in flows {
            links.extend_from_slice(f);
            off.push(links.len() as u32);
        }
        let active: Vec<u32> = (0..flows.len() as u32).collect();
        let mut rates = Vec::new();
        FairShare::default().compute(&active, &off, &links, caps.len(), |l, _| caps[l], &mut rates);
        rates
    }

    #[test]
    fn classic_max_min() {
        // Link 0 (cap 10) carries flows a, b; link 1 (cap 4) carries b, c.
        // Link 1 saturates first at 2: b = c = 2; a gets the rest of link 0: 8.
        let r = run(&[&[0], &[0, 1], &[1]], &[10.0, 4.0]);
        assert_eq!(r, vec![8.0, 2.0, 2.0]);
    }

    #[test]
    fn equal_split() {
        let r = run(&[&[0], &[0], &[0]], &[9.0]);
        assert_eq!(r, vec![3.0, 3.0, 3.0]);
    }
}
