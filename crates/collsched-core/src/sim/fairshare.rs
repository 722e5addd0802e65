//! Max-min fair rates by progressive filling.
//!
//! All flows grow together; the link whose fair share (residual capacity /
//! unfixed flows) is smallest saturates first and fixes its flows at that
//! share; repeat. Fixing flows only raises the fair share of the other links
//! they cross (each fixed rate is at most those links' share), so a heap whose
//! keys may be stale is still a heap of lower bounds: pop, recompute, and
//! re-push if the true share grew. Cost: O(active flow-link incidences + pops·log L).
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

const ONE_LINK: u32 = u32::MAX;
const MANY_LINKS: u32 = u32::MAX - 1;

#[derive(Clone, Copy, Default)]
struct FlowRate {
    rate: f64,
    epoch: u32,
}

/// Max-min state kept across recomputations: which active flows cross each
/// link (updated incrementally as flows start and finish, so a recomputation
/// never rebuilds the incidence lists).
#[derive(Default)]
pub struct FairShare {
    /// Active flows on each link: (flow id, its other link when it crosses exactly two,
    /// ONE_LINK or MANY_LINKS otherwise). Carrying the other link here saves a random
    /// memory access per incidence in the filling loop, which is memory-bound.
    members: Vec<Vec<(u32, u32)>>,
    /// For each flow-link incidence (indexed like the flows' link CSR): its slot in `members`.
    slot: Vec<u32>,
    count: Vec<u32>,
    residual: Vec<f64>,
    /// Rate of each flow, and the pass that fixed it (flows over 3+ links only).
    flow: Vec<FlowRate>,
    /// The pass in which each link saturated: a two-link flow is already fixed
    /// exactly when its other link saturated earlier, a check that stays in cache.
    link_epoch: Vec<u32>,
    epoch: u32,
    heap: BinaryHeap<Key>,
}

impl FairShare {
    pub fn new(num_links: usize, num_flows: usize, incidences: usize) -> FairShare {
        FairShare { members: vec![Vec::new(); num_links], slot: vec![0; incidences], flow: vec![FlowRate::default(); num_flows], ..FairShare::default() }
    }

    /// Current rate of flow `f` (bytes/s), as of the last `compute`.
    #[inline]
    pub fn rate(&self, f: u32) -> f64 {
        self.flow[f as usize].rate
    }

    pub fn add(&mut self, f: u32, link_off: &[u32], links: &[u32]) {
        let (lo, hi) = (link_off[f as usize] as usize, link_off[f as usize + 1] as usize);
        for k in lo..hi {
            let other = match hi - lo {
                1 => ONE_LINK,
                2 => links[lo + hi - 1 - k],
                _ => MANY_LINKS,
            };
            let m = &mut self.members[links[k] as usize];
            self.slot[k] = m.len() as u32;
            m.push((f, other));
        }
    }

    pub fn remove(&mut self, f: u32, link_off: &[u32], links: &[u32]) {
        for k in link_off[f as usize]..link_off[f as usize + 1] {
            let l = links[k as usize];
            let i = self.slot[k as usize] as usize;
            let m = &mut self.members[l as usize];
            m.swap_remove(i);
            if i < m.len() {
                // The flow moved into slot i: find its incidence on link l and repoint it.
                let g = m[i].0 as usize;
                let kk = (link_off[g]..link_off[g + 1]).find(|&kk| links[kk as usize] == l).expect("member crosses its link");
                self.slot[kk as usize] = i as u32;
            }
        }
    }

    /// Rates of all active flows, written to `rate[flow id]`.
    /// `capacity(link, flows_on_link)` gives the usable capacity.
    pub fn compute(&mut self, link_off: &[u32], links: &[u32], capacity: impl Fn(usize, u32) -> f64) {
        let num_links = self.members.len();
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.flow.iter_mut().for_each(|x| x.epoch = 0);
            self.link_epoch.iter_mut().for_each(|x| *x = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.count.clear();
        self.count.extend(self.members.iter().map(|m| m.len() as u32));
        self.link_epoch.resize(num_links, 0);
        self.residual.clear();
        self.residual.extend((0..num_links).map(|l| capacity(l, self.count[l])));
        self.heap.clear();
        for l in 0..num_links {
            if self.count[l] > 0 {
                self.heap.push(Key(self.residual[l] / self.count[l] as f64, l as u32));
            }
        }
        while let Some(Key(key, l)) = self.heap.pop() {
            let li = l as usize;
            let cnt = self.count[li];
            if cnt == 0 {
                continue;
            }
            let share = (self.residual[li] / cnt as f64).max(0.0);
            // Stale key: still the minimum if no other key is below the true share.
            if share > key && self.heap.peek().is_some_and(|top| Key(share, l) < *top) {
                self.heap.push(Key(share, l));
                continue;
            }
            // Guard against a share rounded to zero: keep every rate positive so every flow ends.
            let level = share.max(capacity(li, 0) * 1e-12);
            self.link_epoch[li] = epoch;
            for &(f, other) in &self.members[li] {
                let fi = f as usize;
                if other < MANY_LINKS {
                    if self.link_epoch[other as usize] != epoch {
                        self.flow[fi].rate = level;
                        self.residual[other as usize] -= level;
                        self.count[other as usize] -= 1;
                    }
                    continue;
                }
                let st = &mut self.flow[fi];
                if st.epoch == epoch {
                    continue;
                }
                st.epoch = epoch;
                st.rate = level;
                if other == MANY_LINKS {
                    for &m in &links[link_off[fi] as usize..link_off[fi + 1] as usize] {
                        if m != l {
                            self.residual[m as usize] -= level;
                            self.count[m as usize] -= 1;
                        }
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
        let mut fs = FairShare::new(caps.len(), flows.len(), links.len());
        for f in 0..flows.len() as u32 {
            fs.add(f, &off, &links);
        }
        fs.compute(&off, &links, |l, _| caps[l]);
        (0..flows.len() as u32).map(|f| fs.rate(f)).collect()
    }

    #[test]
    fn three_link_flow() {
        // A flow over links 0,1,2 (cap 6 each) and one flow on link 1 only: 3 each.
        let r = run(&[&[0, 1, 2], &[1]], &[6.0, 6.0, 6.0]);
        assert_eq!(r, vec![3.0, 3.0]);
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

    #[test]
    fn incremental_membership() {
        let off = [0u32, 2, 3, 5];
        let links = [0u32, 1, 0, 0, 1];
        let mut fs = FairShare::new(2, 3, links.len());
        for f in 0..3 {
            fs.add(f, &off, &links);
        }
        fs.remove(0, &off, &links);
        fs.compute(&off, &links, |_, _| 12.0);
        assert_eq!((fs.rate(1), fs.rate(2)), (6.0, 6.0));
        fs.remove(2, &off, &links);
        fs.add(0, &off, &links);
        fs.compute(&off, &links, |_, _| 12.0);
        assert_eq!((fs.rate(0), fs.rate(1)), (6.0, 6.0));
    }
}
