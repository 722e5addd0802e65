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
    /// Global link id → index in `touched` (u32::MAX when untouched; reset after each call).
    local: Vec<u32>,
    touched: Vec<u32>,
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
    /// link id) fixes its unfixed flows at that share. Shares only grow as other links fix
    /// flows, so stale heap keys are lower bounds: re-push when the true share grew.
    /// Cost: O(incidences of `active` + their links · log), independent of other links.
    pub fn compute(&mut self, active: &[u32], link_off: &[u32], links: &[u32], bw: &[u64], rate: &mut [u64]) {
        if self.local.len() < bw.len() {
            self.local.resize(bw.len(), u32::MAX);
        }
        if self.fixed.len() < rate.len() {
            self.fixed.resize(rate.len(), false);
        }
        let flow_links = |f: u32| &links[link_off[f as usize] as usize..link_off[f as usize + 1] as usize];
        self.touched.clear();
        self.count.clear();
        for &f in active {
            for &l in flow_links(f) {
                let li = &mut self.local[l as usize];
                if *li == u32::MAX {
                    *li = self.touched.len() as u32;
                    self.touched.push(l);
                    self.count.push(0);
                }
                self.count[*li as usize] += 1;
            }
        }
        let nl = self.touched.len();
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
            for &l in flow_links(f) {
                let li = self.local[l as usize] as usize;
                self.members[self.fill[li] as usize] = f;
                self.fill[li] += 1;
            }
        }
        self.residual.clear();
        self.residual.extend(self.touched.iter().map(|&l| bw[l as usize].max(1)));
        self.heap.clear();
        for i in 0..nl {
            self.heap.push(Reverse((self.residual[i] / self.count[i] as u64, self.touched[i])));
        }
        while let Some(Reverse((key, l))) = self.heap.pop() {
            let li = self.local[l as usize] as usize;
            let cnt = self.count[li];
            if cnt == 0 {
                continue;
            }
            let share = self.residual[li] / cnt as u64;
            // A stale key (the share grew) is still the minimum if it stays below the next
            // key — a lower bound of every other share — or equals it with a smaller id.
            if share > key && self.heap.peek().is_some_and(|top| (share, l) > top.0) {
                self.heap.push(Reverse((share, l)));
                continue;
            }
            let share = share.max(1);
            for m in self.member_off[li]..self.member_off[li + 1] {
                let f = self.members[m as usize];
                if self.fixed[f as usize] {
                    continue;
                }
                self.fixed[f as usize] = true;
                rate[f as usize] = share;
                for &o in flow_links(f) {
                    let oi = self.local[o as usize] as usize;
                    if oi != li {
                        self.residual[oi] = self.residual[oi].saturating_sub(share);
                        self.count[oi] -= 1;
                    }
                }
            }
            self.count[li] = 0;
        }
        for &l in &self.touched {
            self.local[l as usize] = u32::MAX;
        }
    }
}

/// A whole plan for `run_plan`: transfer t waits for `deps[dep_off[t]..dep_off[t + 1]]`
/// (smaller ids), then `alpha[t]` ns, then runs its flows `flow_off[t]..flow_off[t + 1]`
/// (one per route: two for an antipodal ring transfer, half its bytes each) and completes
/// when all have; flow f moves `bytes[f]` over `links[link_off[f]..link_off[f + 1]]`
/// (each link at most once, bandwidths `bw`).
pub struct PlanFlows<'a> {
    pub alpha: &'a [u64],
    pub dep_off: &'a [u32],
    pub deps: &'a [u32],
    pub flow_off: &'a [u32],
    /// Per flow: its transfer.
    pub transfer: &'a [u32],
    pub bytes: &'a [u64],
    pub link_off: &'a [u32],
    pub links: &'a [u32],
    pub bw: &'a [u64],
}

/// Work units charged per transfer (setup, its start and finish) and per rate
/// computation of a component (its heap and bookkeeping), besides one per flow-link
/// incidence of a rate computation and one per flow scanned for finishes.
pub const TRANSFER_WORK: u64 = 4;
pub const EVENT_WORK: u64 = 16;

/// Coalescing tolerance of `run_plan`, as the simulator's default: 1/1000 of the time
/// scale, divided by the dependency depth so that delays do not add up along chains.
pub const TOLERANCE_DIVISOR: u64 = 1000;

fn find(parent: &mut [u32], mut x: u32) -> u32 {
    while parent[x as usize] != x {
        let up = parent[parent[x as usize] as usize];
        parent[x as usize] = up;
        x = up;
    }
    x
}

/// Finish time (ns) of every transfer of a whole plan under integer max-min fair
/// sharing: the simulator's event loop (dependencies → alpha → fluid flows) in integers.
/// Events within a window of the earliest pending one take effect together at the last
/// of them (only ever later than exact); the window is `max(t, load) / (1000 · depth)`
/// where `load` is the busiest link's bytes / bandwidth and `depth` the longest
/// dependency chain.
///
/// Cost is counted, not clocked: `work` adds each rate computation's flow-link incidences
/// and each scan of a component's flows, plus `TRANSFER_WORK` per transfer and
/// `EVENT_WORK` per rate computation of a component; past `budget` units the run stops and returns
/// None (deterministic: the count does not depend on the machine).
///
/// Flows only interact through shared links, so links are grouped into the connected
/// components of the plan's routes (scale-out rails, each server's scale-up fabric, each
/// copy engine, typically): an event recomputes rates only in the components whose flow
/// set changed, and a flow's remaining bytes are brought up to date only then
/// (`remaining − rate · elapsed` is exact in integers, so this changes no result).
pub fn run_plan(p: &PlanFlows, budget: u64) -> Option<FluidRun> {
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
    let flows = p.bytes.len();
    let flow_links = |f: usize| &p.links[p.link_off[f] as usize..p.link_off[f + 1] as usize];
    let mut carried = vec![0u64; p.bw.len()];
    // Connected components of links (union-find over each flow's links).
    let mut parent: Vec<u32> = (0..p.bw.len() as u32).collect();
    for f in 0..flows {
        let ls = flow_links(f);
        for &l in ls {
            carried[l as usize] = carried[l as usize].saturating_add(p.bytes[f]);
        }
        if let Some(&first) = ls.first() {
            let a = find(&mut parent, first);
            for &l in &ls[1..] {
                let b = find(&mut parent, l);
                if a != b {
                    parent[b as usize] = a;
                }
            }
        }
    }
    let comp_of: Vec<u32> = (0..flows).map(|f| flow_links(f).first().map_or(0, |&l| find(&mut parent, l))).collect();
    let mut flows_left: Vec<u32> = (0..n).map(|t| p.flow_off[t + 1] - p.flow_off[t]).collect();
    let load = carried.iter().zip(p.bw).map(|(&b, &bw)| div_ceil(b as u128 * NS, bw)).max().unwrap_or(0);
    let window = |t: u64| t.max(load) / (TOLERANCE_DIVISOR * chain);

    let mut finish = vec![u64::MAX; n];
    // Per flow: remaining work (bytes · 10⁹) as of `since`, its rate, and its finish at that rate.
    let mut remaining: Vec<u128> = p.bytes.iter().map(|&b| b as u128 * NS).collect();
    let mut since = vec![0u64; flows];
    let mut rate = vec![0u64; flows];
    let mut ends = vec![u64::MAX; flows];
    // Active flows per component (position of each flow in its list, for O(1) removal).
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); p.bw.len()];
    let mut slot = vec![0u32; flows];
    let mut dirty_comp = vec![false; p.bw.len()];
    let mut dirty: Vec<u32> = Vec::new();
    // Per component: the earliest finish of its flows; a heap of (that time, component)
    // with stale entries skipped; pending starts (time, transfer).
    let mut comp_first = vec![u64::MAX; p.bw.len()];
    let mut finishes: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    let mut starts: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    for (t, (&left, &alpha)) in deps_left.iter().zip(p.alpha).enumerate() {
        if left == 0 {
            starts.push(Reverse((alpha, t as u32)));
        }
    }
    let mut rates = MaxMin::default();
    let mut done: Vec<(u64, u32)> = Vec::new();
    let mut starting: Vec<u32> = Vec::new();
    let mut now = 0u64;
    let (mut events, mut work) = (0usize, TRANSFER_WORK * n as u64);
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
        if !dirty.is_empty() {
            for &c in &dirty {
                dirty_comp[c as usize] = false;
                let group = &members[c as usize];
                if group.is_empty() {
                    continue;
                }
                for &f in group {
                    let f = f as usize;
                    remaining[f] = remaining[f].saturating_sub(rate[f] as u128 * (now - since[f]) as u128);
                    since[f] = now;
                }
                work += EVENT_WORK + group.iter().map(|&f| (p.link_off[f as usize + 1] - p.link_off[f as usize]) as u64).sum::<u64>();
                rates.compute(group, p.link_off, p.links, p.bw, &mut rate);
                let mut first = u64::MAX;
                for &f in group {
                    let f = f as usize;
                    ends[f] = now.saturating_add(div_ceil(remaining[f], rate[f]));
                    first = first.min(ends[f]);
                }
                comp_first[c as usize] = first;
                finishes.push(Reverse((first, c)));
            }
            dirty.clear();
            events += 1;
            if work > budget {
                return None;
            }
        }
        // Drop stale entries (components recomputed since).
        while let Some(&Reverse((x, c))) = finishes.peek() {
            if comp_first[c as usize] != x {
                finishes.pop();
            } else {
                break;
            }
        }
        let tc = finishes.peek().map_or(u64::MAX, |e| e.0 .0);
        let ts = starts.peek().map_or(u64::MAX, |s| s.0 .0);
        let te = tc.min(ts);
        if te == u64::MAX {
            break;
        }
        let limit = te.saturating_add(window(te));
        let mut t_p = te;
        done.clear();
        while let Some(&Reverse((x, c))) = finishes.peek() {
            if x > limit {
                break;
            }
            finishes.pop();
            if comp_first[c as usize] != x {
                continue;
            }
            comp_first[c as usize] = u64::MAX; // its flows change: it will be recomputed
            work += members[c as usize].len() as u64;
            for &f in &members[c as usize] {
                let e = ends[f as usize];
                if e <= limit {
                    done.push((e, f));
                    t_p = t_p.max(e);
                }
            }
        }
        done.sort_unstable();
        starting.clear();
        while let Some(&Reverse((x, t))) = starts.peek() {
            if x > limit {
                break;
            }
            starts.pop();
            starting.push(t);
            t_p = t_p.max(x);
        }
        now = t_p;
        for &(x, f) in &done {
            let f = f as usize;
            // Leave its component.
            let c = comp_of[f] as usize;
            let i = slot[f] as usize;
            members[c].swap_remove(i);
            if i < members[c].len() {
                slot[members[c][i] as usize] = i as u32;
            }
            if !dirty_comp[c] {
                dirty_comp[c] = true;
                dirty.push(c as u32);
            }
            // `done` is sorted by time: a transfer's last flow is its finish.
            let t = p.transfer[f] as usize;
            flows_left[t] -= 1;
            if flows_left[t] == 0 {
                complete(t, x, now, &mut finish, &mut deps_left, &mut starts);
            }
        }
        for &t in &starting {
            let t = t as usize;
            for f in p.flow_off[t] as usize..p.flow_off[t + 1] as usize {
                if remaining[f] == 0 || p.link_off[f] == p.link_off[f + 1] {
                    flows_left[t] -= 1;
                    continue;
                }
                let c = comp_of[f] as usize;
                slot[f] = members[c].len() as u32;
                members[c].push(f as u32);
                since[f] = now;
                if !dirty_comp[c] {
                    dirty_comp[c] = true;
                    dirty.push(c as u32);
                }
            }
            if flows_left[t] == 0 {
                complete(t, now, now, &mut finish, &mut deps_left, &mut starts);
            }
        }
        // Components in a fixed order: rates do not depend on it, but keep it canonical.
        dirty.sort_unstable();
    }
    // Transfers never released (a dependency cycle; verified plans have none) count as 0.
    for f in finish.iter_mut() {
        if *f == u64::MAX {
            *f = 0;
        }
    }
    Some(FluidRun { finish, events, work })
}

/// What `run_plan` computed: every transfer's finish (ns), the rate computations, and
/// the work counted (flow-link incidences of the rate computations and component scans).
pub struct FluidRun {
    pub finish: Vec<u64>,
    pub events: usize,
    pub work: u64,
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
        let flow_off: Vec<u32> = (0..=alpha.len() as u32).collect();
        let transfer: Vec<u32> = (0..alpha.len() as u32).collect();
        run_plan(&PlanFlows { alpha: &alpha, dep_off: &dep_off, deps: &deps, flow_off: &flow_off, transfer: &transfer, bytes: &bytes, link_off: &link_off, links: &links, bw }, u64::MAX).unwrap().finish
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

    #[test]
    fn a_transfer_of_two_flows_ends_with_the_later() {
        // Transfer 0 splits over links 0 and 1 (500 bytes each); transfer 1 shares link 1.
        let flows = PlanFlows {
            alpha: &[0, 0],
            dep_off: &[0, 0, 0],
            deps: &[],
            flow_off: &[0, 2, 3],
            transfer: &[0, 0, 1],
            bytes: &[500, 500, 500],
            link_off: &[0, 1, 2, 3],
            links: &[0, 1, 1],
            bw: &[GB, GB],
        };
        // Link 0: 500 ns alone; link 1: two flows of 500 bytes share it, both end at 1000.
        assert_eq!(run_plan(&flows, u64::MAX).unwrap().finish, vec![1000, 1000]);
    }

    #[test]
    fn a_run_over_its_work_budget_stops() {
        let (alpha, bytes, dep_off, deps) = ([0u64, 0], [1000u64, 3000], [0u32, 0, 0], []);
        let (link_off, links) = ([0u32, 1, 2], [0u32, 0]);
        let flows = PlanFlows { alpha: &alpha, dep_off: &dep_off, deps: &deps, flow_off: &[0, 1, 2], transfer: &[0, 1], bytes: &bytes, link_off: &link_off, links: &links, bw: &[GB] };
        let full = run_plan(&flows, u64::MAX).unwrap();
        assert_eq!(full.finish, vec![2000, 4000]);
        assert!(run_plan(&flows, full.work).is_some());
        assert!(run_plan(&flows, 1).is_none());
    }
}
