//! Integer max-min fluid model of one dependency level's transfers.
//!
//! Per-link processor sharing misses the coupling between links: a flow throttled at
//! its receiver's NIC downlink leaves part of its sender's uplink idle, so the uplink's
//! other flows finish later than "its bytes / its bandwidth" (balanced_direct's
//! scale-out round, all of whose flows start together, is the typical case). Here the
//! level's flows start at their release times and share every link they cross max-min
//! fairly, as the simulator's flows do, but in integers: time in ns, rates in bytes/s
//! (a link's fair share is `residual / flows`, rounded down, ≥ 1), remaining work in
//! byte·ns/s units (bytes · 10⁹), and a flow's finish is rounded up to the next ns.
//! Progressive filling picks the link of smallest rounded share, ties by link index,
//! so the result is bit-deterministic.
//!
//! Cost: one rate computation per event (a release or a batch of simultaneous
//! finishes), each O(active flow-link incidences + links · log links). Flows whose
//! finishes fall within `window` ns of the earliest one finish together at the latest
//! of them (never earlier than exact), which bounds the number of events on levels
//! with many distinct flow sizes.
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NS: u128 = 1_000_000_000;

/// Max-min fair rates by progressive filling, in integers. Buffers are reused.
#[derive(Default)]
pub struct MaxMin {
    residual: Vec<u64>,
    count: Vec<u32>,
    member_off: Vec<u32>,
    fill: Vec<u32>,
    members: Vec<u32>,
    fixed: Vec<bool>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl MaxMin {
    /// Rates (bytes/s, ≥ 1) of the `active` flows into `rate[flow]`. Flow f crosses
    /// `links[link_off[f]..link_off[f + 1]]` (each link at most once); `bw[link]` in bytes/s.
    /// The link with the smallest share (residual / unfixed flows, rounded down; ties by
    /// index) fixes its unfixed flows at that share. Shares only grow as other links fix
    /// flows, so stale heap keys are lower bounds: re-push when the true share grew.
    pub fn compute(&mut self, active: &[u32], link_off: &[u32], links: &[u32], bw: &[u64], rate: &mut [u64]) {
        let nl = bw.len();
        self.count.clear();
        self.count.resize(nl, 0);
        if self.fixed.len() < rate.len() {
            self.fixed.resize(rate.len(), false);
        }
        for &f in active {
            for &l in &links[link_off[f as usize] as usize..link_off[f as usize + 1] as usize] {
                self.count[l as usize] += 1;
            }
        }
        self.member_off.clear();
        self.member_off.push(0);
        let mut acc = 0u32;
        for &c in &self.count {
            acc += c;
            self.member_off.push(acc);
        }
        self.members.clear();
        self.members.resize(acc as usize, 0);
        self.fill.clear();
        self.fill.extend_from_slice(&self.member_off[..nl]);
        for &f in active {
            self.fixed[f as usize] = false;
            for &l in &links[link_off[f as usize] as usize..link_off[f as usize + 1] as usize] {
                let l = l as usize;
                self.members[self.fill[l] as usize] = f;
                self.fill[l] += 1;
            }
        }
        self.residual.clear();
        self.residual.extend(bw.iter().map(|&b| b.max(1)));
        self.heap.clear();
        for l in 0..nl {
            if self.count[l] > 0 {
                self.heap.push(Reverse((self.residual[l] / self.count[l] as u64, l as u32)));
            }
        }
        while let Some(Reverse((key, l))) = self.heap.pop() {
            let li = l as usize;
            let cnt = self.count[li];
            if cnt == 0 {
                continue;
            }
            let share = self.residual[li] / cnt as u64;
            if share > key {
                self.heap.push(Reverse((share, l)));
                continue;
            }
            let share = share.max(1);
            for m in self.member_off[li]..self.member_off[li + 1] {
                let f = self.members[m as usize] as usize;
                if self.fixed[f] {
                    continue;
                }
                self.fixed[f] = true;
                rate[f] = share;
                for &o in &links[link_off[f] as usize..link_off[f + 1] as usize] {
                    let o = o as usize;
                    if o != li {
                        self.residual[o] = self.residual[o].saturating_sub(share);
                        self.count[o] -= 1;
                    }
                }
            }
            self.count[li] = 0;
        }
    }
}

/// A whole plan for `run_plan`: transfer t waits for `deps[dep_off[t]..dep_off[t + 1]]`
/// (smaller ids), then `alpha[t]` ns, then moves `bytes[t]` over
/// `links[link_off[t]..link_off[t + 1]]` (each at most once, bandwidths `bw`).
pub struct PlanFlows<'a> {
    pub alpha: &'a [u64],
    pub dep_off: &'a [u32],
    pub deps: &'a [u32],
    pub bytes: &'a [u64],
    pub link_off: &'a [u32],
    pub links: &'a [u32],
    pub bw: &'a [u64],
}

/// Coalescing tolerance of `run_plan`, as the simulator's default: 1/1000 of the time
/// scale, divided by the dependency depth so that delays do not add up along chains.
pub const TOLERANCE_DIVISOR: u64 = 1000;

/// Finish time (ns) of every transfer of a whole plan under integer max-min fair
/// sharing: the simulator's event loop (dependencies → alpha → fluid flows) in integers.
/// Events within a window of the earliest pending one take effect together at the last
/// of them (only ever later than exact); the window is `max(t, load) / (1000 · depth)`
/// where `load` is the busiest link's bytes / bandwidth and `depth` the longest
/// dependency chain. Returns the finish times and the number of rate computations.
pub fn run_plan(p: &PlanFlows) -> (Vec<u64>, usize) {
    let n = p.alpha.len();
    // Dependents (CSR) and dependency counts.
    let mut dependents_off = vec![0u32; n + 1];
    let mut depth = vec![1u32; n];
    let mut deps_left = vec![0u32; n];
    for t in 0..n {
        for &d in &p.deps[p.dep_off[t] as usize..p.dep_off[t + 1] as usize] {
            dependents_off[d as usize + 1] += 1;
            deps_left[t] += 1;
            depth[t] = depth[t].max(depth[d as usize] + 1);
        }
    }
    for t in 0..n {
        dependents_off[t + 1] += dependents_off[t];
    }
    let mut fill = dependents_off.clone();
    let mut dependents = vec![0u32; dependents_off[n] as usize];
    for t in 0..n {
        for &d in &p.deps[p.dep_off[t] as usize..p.dep_off[t + 1] as usize] {
            dependents[fill[d as usize] as usize] = t as u32;
            fill[d as usize] += 1;
        }
    }
    let chain = depth.iter().copied().max().unwrap_or(1).max(1) as u64;
    let mut carried = vec![0u64; p.bw.len()];
    for t in 0..n {
        for &l in &p.links[p.link_off[t] as usize..p.link_off[t + 1] as usize] {
            carried[l as usize] = carried[l as usize].saturating_add(p.bytes[t]);
        }
    }
    let load = carried.iter().zip(p.bw).map(|(&b, &bw)| div_ceil(b as u128 * NS, bw)).max().unwrap_or(0);
    let window = |t: u64| t.max(load) / (TOLERANCE_DIVISOR * chain);

    let mut finish = vec![u64::MAX; n];
    let mut remaining: Vec<u128> = p.bytes.iter().map(|&b| b as u128 * NS).collect();
    let mut rate = vec![0u64; n];
    let mut starts: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    for t in 0..n {
        if deps_left[t] == 0 {
            starts.push(Reverse((p.alpha[t], t as u32)));
        }
    }
    let mut rates = MaxMin::default();
    let mut active: Vec<u32> = Vec::new();
    let mut done: Vec<(u64, u32)> = Vec::new();
    let mut starting: Vec<u32> = Vec::new();
    let mut now = 0u64;
    let mut dirty = false;
    let mut events = 0usize;
    // Complete transfer t at `at`: its dependents become ready alpha later (not before now).
    let complete = |t: usize, at: u64, now: u64, finish: &mut Vec<u64>, deps_left: &mut Vec<u32>, starts: &mut BinaryHeap<Reverse<(u64, u32)>>| {
        finish[t] = at;
        for &d in &dependents[dependents_off[t] as usize..dependents_off[t + 1] as usize] {
            let d = d as usize;
            deps_left[d] -= 1;
            if deps_left[d] == 0 {
                starts.push(Reverse((at.saturating_add(p.alpha[d]).max(now), d as u32)));
            }
        }
    };
    loop {
        if dirty {
            rates.compute(&active, p.link_off, p.links, p.bw, &mut rate);
            events += 1;
            dirty = false;
        }
        let mut tc = u64::MAX;
        for &f in &active {
            let f = f as usize;
            tc = tc.min(now.saturating_add(div_ceil(remaining[f], rate[f])));
        }
        let ts = starts.peek().map_or(u64::MAX, |s| s.0 .0);
        let te = tc.min(ts);
        if te == u64::MAX {
            break;
        }
        let limit = te.saturating_add(window(te));
        let mut t_p = te;
        done.clear();
        if tc <= limit {
            for &f in &active {
                let x = now.saturating_add(div_ceil(remaining[f as usize], rate[f as usize]));
                if x <= limit {
                    done.push((x, f));
                    t_p = t_p.max(x);
                }
            }
            done.sort_unstable();
        }
        starting.clear();
        while let Some(&Reverse((x, t))) = starts.peek() {
            if x > limit {
                break;
            }
            starts.pop();
            starting.push(t);
            t_p = t_p.max(x);
        }
        let dt = (t_p - now) as u128;
        now = t_p;
        for &(x, f) in &done {
            remaining[f as usize] = 0;
            complete(f as usize, x, now, &mut finish, &mut deps_left, &mut starts);
        }
        active.retain(|&f| {
            let f = f as usize;
            if remaining[f] == 0 {
                return false;
            }
            remaining[f] = remaining[f].saturating_sub(rate[f] as u128 * dt).max(1);
            true
        });
        dirty |= !done.is_empty();
        for &t in &starting {
            let t = t as usize;
            if remaining[t] == 0 || p.link_off[t] == p.link_off[t + 1] {
                complete(t, now, now, &mut finish, &mut deps_left, &mut starts);
            } else {
                active.push(t as u32);
                dirty = true;
            }
        }
    }
    // Transfers never released (a dependency cycle; verified plans have none) count as 0.
    for f in finish.iter_mut() {
        if *f == u64::MAX {
            *f = 0;
        }
    }
    (finish, events)
}

#[inline]
fn div_ceil(work: u128, rate: u64) -> u64 {
    let rate = rate.max(1);
    if work <= u64::MAX as u128 {
        return (work as u64).div_ceil(rate);
    }
    work.div_ceil(rate as u128).min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flows (release alpha, bytes, links, deps) on links of the given bandwidths.
    fn finish(bw: &[u64], flows: &[(u64, u64, &[u32], &[u32])]) -> Vec<u64> {
        let (mut alpha, mut bytes, mut dep_off, mut deps, mut link_off, mut links) = (vec![], vec![], vec![0u32], vec![], vec![0u32], vec![]);
        for &(a, b, l, d) in flows {
            alpha.push(a);
            bytes.push(b);
            links.extend_from_slice(l);
            link_off.push(links.len() as u32);
            deps.extend_from_slice(d);
            dep_off.push(deps.len() as u32);
        }
        run_plan(&PlanFlows { alpha: &alpha, dep_off: &dep_off, deps: &deps, bytes: &bytes, link_off: &link_off, links: &links, bw }).0
    }
    const GB: u64 = 1_000_000_000; // 1 byte per ns

    #[test]
    fn one_link_is_processor_sharing() {
        // 1000 and 3000 bytes together: the small one ends at 2 µs, the big one at 4 µs.
        assert_eq!(finish(&[GB], &[(0, 1000, &[0], &[]), (0, 3000, &[0], &[])]), vec![2000, 4000]);
    }

    #[test]
    fn a_flow_throttled_elsewhere_leaves_its_share_to_others() {
        // Link 1 (0.5 B/ns) carries b and c: 0.25 each; a takes the other 0.75 of link 0.
        // Per-link equal sharing would give a only half of link 0.
        let r = finish(&[GB, GB / 2], &[(0, 3000, &[0], &[]), (0, 1000, &[0, 1], &[]), (0, 1000, &[1], &[])]);
        assert_eq!(r, vec![4000, 4000, 4000]);
        // c larger: once a and b are done it drains alone at full rate.
        let r = finish(&[GB, GB], &[(0, 1000, &[0], &[]), (0, 1000, &[0, 1], &[]), (0, 3000, &[1], &[])]);
        assert_eq!(r, vec![2000, 2000, 4000]);
    }

    #[test]
    fn dependencies_wait_and_pay_alpha() {
        // a and c share link 0 until a ends at 1000 ns; c runs alone until b, released
        // after a plus 500 ns of alpha, joins at 1500 ns with 1000 bytes left on each side.
        let r = finish(&[GB], &[(0, 500, &[0], &[]), (500, 1000, &[0], &[0]), (0, 2000, &[0], &[])]);
        assert_eq!(r, vec![1000, 3500, 3500]);
        // A zero-byte transfer completes at its release.
        assert_eq!(finish(&[GB], &[(0, 1000, &[0], &[]), (7, 0, &[0], &[0])]), vec![1000, 1007]);
    }
}
