//! The event loop: dependencies → alpha → max-min fair flow over links.
//!
//! Time advances window by window. A window opens at the earliest pending
//! event `te` (a flow finishing or a transfer starting) and takes every event
//! up to `te + tolerance · max(te, T_load)`, where `T_load` is the busiest
//! link's bytes / capacity (the plan's own load time scale). All events of a
//! window take effect at its last event time `t_p`: flows that finished early
//! keep their bandwidth until `t_p` (it idles) and starts wait until `t_p`.
//! Events are only ever delayed, never advanced, so the simulated schedule is
//! feasible and never beats the lower bound; a million distinct flow sizes
//! cost about 1/tolerance rate recomputations instead of a million. Transfer
//! end times are the exact moments their last byte arrives, and dependents
//! become ready then. With `tolerance = 0` only exact ties (1e-12 relative) merge.
//! The window shrinks with the plan's dependency depth (`chain_depth`), so
//! pipelined plans with long chains are not delayed once per link of the chain.
use super::fairshare::FairShare;
use super::links::{LinkClass, Links};
use super::SimOptions;
use crate::plan::Plan;
use crate::plan::Transfer;
use crate::topology::hardware::PPM;
use crate::topology::{Cluster, Tier};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Static routing of every transfer: flows and their links in CSR form.
pub struct Flows {
    pub transfer: Vec<u32>,
    pub bytes: Vec<f64>,
    pub link_off: Vec<u32>,
    pub links: Vec<u32>,
    /// Flows of transfer t are `flow_begin[t]..flow_begin[t+1]`.
    pub flow_begin: Vec<u32>,
}

impl Flows {
    /// `ll`: per transfer, whether it uses the low-latency protocol (`sim::protocol`; empty:
    /// none), whose wire bytes are its bytes / `payload_ppm` (the flags travel too); with
    /// `ll_caps`, the k-th such transfer also crosses private link `ll_caps + k` (its rate cap).
    pub fn build(plan: &Plan, links: &Links, ll: &[bool], payload_ppm: u32, ll_caps: Option<u32>) -> Flows {
        let ll_factor = PPM as f64 / payload_ppm as f64;
        let mut next_cap = ll_caps;
        let n = plan.transfers.len();
        let mut f = Flows { transfer: Vec::with_capacity(n), bytes: Vec::with_capacity(n), link_off: vec![0], links: Vec::with_capacity(2 * n), flow_begin: Vec::with_capacity(n + 1) };
        for (id, t) in plan.transfers.iter().enumerate() {
            f.flow_begin.push(f.transfer.len() as u32);
            let bytes = plan.transfer_bytes(t);
            if bytes == 0 {
                continue; // pays alpha only
            }
            let low_latency = ll.get(id).copied().unwrap_or(false);
            let wire = if low_latency { bytes as f64 * ll_factor } else { bytes as f64 };
            let cap = if low_latency { next_cap } else { None };
            if let Some(c) = cap {
                next_cap = Some(c + 1);
            }
            for r in links.route(t.src, t.dst, t.tier) {
                f.transfer.push(id as u32);
                f.bytes.push(wire * r.share);
                f.links.extend_from_slice(&r.links);
                f.links.extend(cap);
                f.link_off.push(f.links.len() as u32);
            }
        }
        f.flow_begin.push(f.transfer.len() as u32);
        f
    }
    pub fn links_of(&self, f: usize) -> &[u32] {
        &self.links[self.link_off[f] as usize..self.link_off[f + 1] as usize]
    }
}

/// The plan's busiest link's bytes / capacity: a time scale for the coalescing window.
fn load_time(links: &Links, flows: &Flows) -> f64 {
    let mut carried = vec![0f64; links.len()];
    for f in 0..flows.transfer.len() {
        for &l in flows.links_of(f) {
            carried[l as usize] += flows.bytes[f];
        }
    }
    carried.iter().zip(&links.capacity).map(|(b, c)| b / c).fold(0.0, f64::max)
}

/// Longest chain of transfers through dependencies (and steps under barriers).
/// Each window may delay one link of a chain, so the per-window tolerance is
/// divided by this depth: the total delay along any chain stays within
/// `tolerance` of the time scale, however deep the pipeline (FAST's stages).
fn chain_depth(plan: &Plan, barrier_steps: bool) -> usize {
    let mut depth = vec![1u32; plan.transfers.len()];
    let mut deepest = 0u32;
    for (id, t) in plan.transfers.iter().enumerate() {
        for &d in plan.deps_of(t) {
            if d as usize >= id {
                return plan.transfers.len().max(1); // not in id order: assume the worst
            }
            depth[id] = depth[id].max(depth[d as usize] + 1);
        }
        deepest = deepest.max(depth[id]);
    }
    let steps = if barrier_steps { plan.num_steps() } else { 0 };
    deepest.max(steps).max(1) as usize
}

/// Per transfer: whether it is the first between its (sender, receiver) pair in plan order,
/// the one that pays the connection's pipeline-chunk fill (later pieces stream behind it).
pub(crate) fn first_on_connection(plan: &Plan) -> Vec<bool> {
    let mut primed = std::collections::HashSet::new();
    plan.transfers.iter().map(|t| primed.insert((t.src, t.dst))).collect()
}

/// Whether `t` waits on an earlier step (a dependency of an earlier step, or any later step
/// under `barrier_steps`): a stage-by-stage schedule's synchronisation point.
pub(crate) fn is_staged(plan: &Plan, t: &Transfer, barrier_steps: bool) -> bool {
    (barrier_steps && t.step > 0) || plan.deps_of(t).iter().any(|&d| plan.transfers[d as usize].step < t.step)
}

/// The hardware model's start-up delay of every transfer beyond its tier's alpha
/// (`Cluster::hw`, docs/simulator.md): its pipeline chunk's fill time (the first transfer
/// of each (sender, receiver) pair only: a connection's later pieces stream behind it), the per-stage
/// synchronisation when it waits on an earlier step, and the per-peer cost of the other
/// peers its sender has in its step. A low-latency-protocol transfer (`ll[id]`,
/// `sim::protocol`) pays neither fill nor synchronisation (its flags travel with the data;
/// its own latency replaces alpha in the engine), only the per-peer cost. Empty when the
/// terms are neutral (the fluid model).
pub fn startup_extra(plan: &Plan, cluster: &Cluster, barrier_steps: bool, ll: &[bool]) -> Vec<f64> {
    let hw = cluster.hw;
    if hw.chunk_scaleout_bytes == 0 && hw.chunk_scaleup_bytes == 0 && hw.step_ns == 0 && hw.peer_ns == 0 {
        return Vec::new();
    }
    let out_rate = super::links::effective(cluster.nic_bw, hw.eff_scaleout_ppm);
    let up_rate = super::links::effective(cluster.scaleup_bw(), hw.eff_scaleup_ppm);
    let peers = if hw.peer_ns > 0 { peers_in_step(plan) } else { Vec::new() };
    let first = first_on_connection(plan);
    plan.transfers
        .iter()
        .enumerate()
        .map(|(id, t)| {
            let others = peers.get(id).map_or(0, |&k| k.saturating_sub(1));
            let peer = others as f64 * hw.peer_ns as f64 * 1e-9;
            if ll.get(id).copied().unwrap_or(false) {
                return peer;
            }
            let bytes = if first[id] { plan.transfer_bytes(t) } else { 0 };
            let fill = match t.tier {
                Tier::ScaleOut => bytes.min(hw.chunk_scaleout_bytes) as f64 / out_rate,
                Tier::ScaleUp => bytes.min(hw.chunk_scaleup_bytes) as f64 / up_rate,
                Tier::Local => 0.0,
            };
            let sync = if is_staged(plan, t, barrier_steps) { hw.step_ns as f64 * 1e-9 } else { 0.0 };
            fill + sync + peer
        })
        .collect()
}

/// The receiver's side of a point-to-point rendezvous (`HardwareTerms::rendezvous`): a
/// transfer of step s also waits for every earlier transfer (in plan order) its receiver
/// sends or receives in the receiver's latest step before s, as a grouped send/receive
/// posted in stream order does (the receiver posts step s's receive only when its step
/// s−1 is done). Only earlier transfers, so the dependency graph stays acyclic.
fn rendezvous_deps(plan: &Plan) -> Vec<Vec<u32>> {
    let ranks = plan.num_ranks() as usize;
    let mut touching: Vec<Vec<(u32, u32)>> = vec![Vec::new(); ranks];
    for (id, t) in plan.transfers.iter().enumerate() {
        touching[t.src as usize].push((t.step, id as u32));
        if t.dst != t.src {
            touching[t.dst as usize].push((t.step, id as u32));
        }
    }
    for list in &mut touching {
        list.sort_unstable();
    }
    plan.transfers
        .iter()
        .enumerate()
        .map(|(id, t)| {
            let list = &touching[t.dst as usize];
            let before = list.partition_point(|&(s, _)| s < t.step);
            let Some(&(prev, _)) = list[..before].last() else { return Vec::new() };
            let first = list.partition_point(|&(s, _)| s < prev);
            let mut deps: Vec<u32> = list[first..before].iter().map(|&(_, d)| d).filter(|&d| (d as usize) < id).collect();
            // The plan's own dependencies are counted already: no duplicates.
            deps.retain(|d| !plan.deps_of(t).contains(d));
            deps
        })
        .collect()
}

/// For each transfer, how many distinct ranks its sender sends to in the same step.
fn peers_in_step(plan: &Plan) -> Vec<u32> {
    let mut keyed: Vec<(u32, u32, u32, u32)> = plan.transfers.iter().enumerate().map(|(id, t)| (t.src, t.step, t.dst, id as u32)).collect();
    keyed.sort_unstable();
    let mut peers = vec![0u32; plan.transfers.len()];
    let mut i = 0;
    while i < keyed.len() {
        let (src, step) = (keyed[i].0, keyed[i].1);
        let j = keyed[i..].iter().position(|k| (k.0, k.1) != (src, step)).map_or(keyed.len(), |p| i + p);
        let distinct = 1 + keyed[i..j].windows(2).filter(|w| w[0].2 != w[1].2).count() as u32;
        for k in &keyed[i..j] {
            peers[k.3 as usize] = distinct;
        }
        i = j;
    }
    peers
}

#[derive(Clone, Copy, PartialEq)]
struct Start(f64, u32);
impl Eq for Start {}
impl PartialOrd for Start {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Start {
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1)) // min-heap on (time, transfer id)
    }
}

/// What the event loop measured.
pub struct Timeline {
    pub start: Vec<f64>,
    pub end: Vec<f64>,
    pub windows: usize,
    pub recomputations: usize,
}

pub struct Engine<'a> {
    plan: &'a Plan,
    links: &'a Links,
    flows: &'a Flows,
    opts: &'a SimOptions,
    alpha: [f64; 3],
    /// Per transfer: whether it uses the low-latency protocol (empty: none), and that
    /// protocol's latency per tier, which replaces alpha for it.
    ll: &'a [bool],
    ll_alpha: [f64; 3],
    /// Per transfer: the hardware model's start-up beyond alpha (empty: none).
    extra: Vec<f64>,
    /// Incast counts only flows of at least this many bytes (`HardwareTerms::incast_min_bytes`;
    /// 0: every flow, and `large` stays empty); `large[l]`: such flows active on link l.
    incast_min: f64,
    large: Vec<u32>,
    dependents_off: Vec<u32>,
    dependents: Vec<u32>,
    deps_left: Vec<u32>,
    flows_left: Vec<u32>,
    start: Vec<f64>,
    end: Vec<f64>,
    starts: BinaryHeap<Start>,
    // Barrier bookkeeping (only with barrier_steps).
    step_left: Vec<u32>,
    frontier: usize,
    parked: Vec<Vec<u32>>,
    now: f64,
    // Active flow ids; remaining bytes and rate are indexed by flow id.
    active: Vec<u32>,
    remaining: Vec<f64>,
    fair: FairShare,
    completed: usize,
}

impl<'a> Engine<'a> {
    /// `ll`: per transfer, whether it uses the low-latency protocol (`sim::protocol::low_latency`; empty: none).
    pub fn new(plan: &'a Plan, cluster: &Cluster, links: &'a Links, flows: &'a Flows, opts: &'a SimOptions, ll: &'a [bool]) -> Engine<'a> {
        let n = plan.transfers.len();
        let rdv = if cluster.hw.rendezvous { rendezvous_deps(plan) } else { Vec::new() };
        let extra_deps = |id: usize| rdv.get(id).map_or(&[][..], Vec::as_slice);
        // Counted through the transfers' ranges, not over `plan.deps`: an entry no range
        // covers (a valid, if odd, plan) must not leave an empty dependents slot behind.
        let mut dep_count = vec![0u32; n + 1];
        for (id, t) in plan.transfers.iter().enumerate() {
            for &d in plan.deps_of(t).iter().chain(extra_deps(id)) {
                dep_count[d as usize] += 1;
            }
        }
        let mut dependents_off = Vec::with_capacity(n + 1);
        let mut acc = 0;
        for &c in &dep_count[..n] {
            dependents_off.push(acc);
            acc += c;
        }
        dependents_off.push(acc);
        let mut fill = dependents_off.clone();
        let mut dependents = vec![0u32; acc as usize];
        let mut deps_left = vec![0u32; n];
        for (id, t) in plan.transfers.iter().enumerate() {
            for &d in plan.deps_of(t).iter().chain(extra_deps(id)) {
                dependents[fill[d as usize] as usize] = id as u32;
                fill[d as usize] += 1;
            }
            deps_left[id] = t.dep_end - t.dep_begin + extra_deps(id).len() as u32;
        }
        let steps = plan.num_steps() as usize;
        let mut step_left = vec![0u32; steps];
        for t in &plan.transfers {
            step_left[t.step as usize] += 1;
        }
        let flows_left = (0..n).map(|t| flows.flow_begin[t + 1] - flows.flow_begin[t]).collect();
        let a = |tier| cluster.alpha_ns(tier) as f64 * 1e-9;
        let mut e = Engine {
            plan,
            links,
            flows,
            opts,
            alpha: [a(Tier::Local), a(Tier::ScaleUp), a(Tier::ScaleOut)],
            ll,
            ll_alpha: [a(Tier::Local), cluster.hw.ll_alpha_scaleup_ns as f64 * 1e-9, cluster.hw.ll_alpha_scaleout_ns as f64 * 1e-9],
            extra: startup_extra(plan, cluster, opts.barrier_steps, ll),
            incast_min: cluster.hw.incast_min_bytes as f64,
            large: if cluster.hw.incast_min_bytes > 0 && opts.incast.is_some() { vec![0; links.len()] } else { Vec::new() },
            dependents_off,
            dependents,
            deps_left,
            flows_left,
            start: vec![f64::NAN; n],
            end: vec![f64::NAN; n],
            starts: BinaryHeap::new(),
            step_left,
            frontier: 0,
            parked: vec![Vec::new(); steps],
            now: 0.0,
            active: Vec::new(),
            remaining: flows.bytes.clone(),
            fair: FairShare::new(links.len(), flows.bytes.len(), flows.links.len()),
            completed: 0,
        };
        e.advance_frontier(0.0);
        for id in 0..n {
            if e.deps_left[id] == 0 {
                e.make_ready(id as u32, 0.0);
            }
        }
        e
    }

    fn make_ready(&mut self, id: u32, time: f64) {
        let t = &self.plan.transfers[id as usize];
        if self.opts.barrier_steps && t.step as usize > self.frontier {
            self.parked[t.step as usize].push(id);
            return;
        }
        let low_latency = self.ll.get(id as usize).copied().unwrap_or(false);
        let mut alpha = if low_latency { self.ll_alpha[t.tier as usize] } else { self.alpha[t.tier as usize] };
        if let Some(x) = self.extra.get(id as usize) {
            alpha += x;
        }
        let at = if self.opts.warm_connections { self.warm_start(id, time, alpha) } else { time + alpha };
        self.starts.push(Start(at.max(self.now), id));
    }

    /// Start of a transfer on a warm connection (`SimOptions::warm_connections`): its
    /// dependencies between the same two ranks are the connection's previous pieces, whose
    /// transmission hides its alpha; the alpha runs from the other dependencies' end (or a
    /// later barrier release, `time`). Without such a dependency: `time + alpha`.
    fn warm_start(&self, id: u32, time: f64, alpha: f64) -> f64 {
        let t = &self.plan.transfers[id as usize];
        let (mut conn, mut other) = (f64::NEG_INFINITY, 0f64);
        for &d in self.plan.deps_of(t) {
            let p = &self.plan.transfers[d as usize];
            let end = self.end[d as usize];
            if p.src == t.src && p.dst == t.dst {
                conn = conn.max(end);
            } else {
                other = other.max(end);
            }
        }
        if conn == f64::NEG_INFINITY {
            return time + alpha;
        }
        let issued = if time > conn.max(other) { time } else { other };
        conn.max(issued + alpha)
    }

    /// Move the barrier past every finished step and release what waited for it.
    fn advance_frontier(&mut self, time: f64) {
        if !self.opts.barrier_steps {
            return;
        }
        while self.frontier < self.step_left.len() && self.step_left[self.frontier] == 0 {
            self.frontier += 1;
            if self.frontier < self.parked.len() {
                for id in std::mem::take(&mut self.parked[self.frontier]) {
                    self.make_ready(id, time);
                }
            }
        }
    }

    fn complete(&mut self, id: u32, time: f64) {
        self.end[id as usize] = time;
        self.completed += 1;
        let lo = self.dependents_off[id as usize] as usize;
        let hi = self.dependents_off[id as usize + 1] as usize;
        for k in lo..hi {
            let d = self.dependents[k];
            self.deps_left[d as usize] -= 1;
            if self.deps_left[d as usize] == 0 {
                self.make_ready(d, time);
            }
        }
        if self.opts.barrier_steps {
            let s = self.plan.transfers[id as usize].step as usize;
            self.step_left[s] -= 1;
            self.advance_frontier(time);
        }
    }

    /// Begin a transfer now: its flows join the active set, or it ends at once if empty.
    fn begin(&mut self, id: u32) {
        self.start[id as usize] = self.now;
        let (lo, hi) = (self.flows.flow_begin[id as usize], self.flows.flow_begin[id as usize + 1]);
        if lo == hi {
            self.complete(id, self.now);
            return;
        }
        for f in lo..hi {
            self.active.push(f);
            self.fair.add(f, &self.flows.link_off, &self.flows.links);
            self.count_large(f, 1);
        }
    }

    /// Track flow `f` (joining: +1, leaving: -1) among the large flows of its links.
    fn count_large(&mut self, f: u32, delta: i32) {
        if self.large.is_empty() || self.flows.bytes[f as usize] < self.incast_min {
            return;
        }
        for &l in self.flows.links_of(f as usize) {
            self.large[l as usize] = self.large[l as usize].wrapping_add_signed(delta);
        }
    }

    pub fn run(mut self) -> Result<Timeline, String> {
        let tol = self.opts.tolerance.max(0.0) / chain_depth(self.plan, self.opts.barrier_steps) as f64;
        let (links, flows) = (self.links, self.flows);
        let time_scale = load_time(links, flows);
        let caps = &links.capacity;
        let class = &links.class;
        let incast = self.opts.incast;
        // With `incast_min`, only the large flows on a downlink count towards its threshold.
        let capacity = |l: usize, n: u32, large: &[u32]| -> f64 {
            let n = if large.is_empty() { n } else { large[l] };
            match incast {
                Some(m) if class[l] == LinkClass::NicDown && n > m.threshold => caps[l] * m.goodput,
                _ => caps[l],
            }
        };
        let mut cands: Vec<(f64, u32)> = Vec::new();
        let mut finish: Vec<f64> = Vec::new();
        let mut done = Vec::new();
        let (mut windows, mut recomputations) = (0usize, 0usize);
        let mut dirty = false;
        loop {
            if dirty {
                let large = &self.large;
                self.fair.compute(&flows.link_off, &flows.links, |l, n| capacity(l, n, large));
                recomputations += 1;
                dirty = false;
            }
            // Earliest completion among active flows.
            let now = self.now;
            let mut tc = f64::INFINITY;
            finish.clear();
            for &f in &self.active {
                let x = now + self.remaining[f as usize] / self.fair.rate(f);
                finish.push(x);
                tc = tc.min(x);
            }
            let ts = self.starts.peek().map_or(f64::INFINITY, |s| s.0);
            let te = tc.min(ts);
            if te == f64::INFINITY {
                break;
            }
            windows += 1;
            let limit = te + te.max(time_scale) * tol + te * 1e-12;
            cands.clear();
            if tc <= limit {
                for (&f, &x) in self.active.iter().zip(&finish) {
                    if x <= limit {
                        cands.push((x, f));
                    }
                }
                cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            }
            // Every completion and start in the window takes effect at its last event time.
            let mut t_p = te;
            done.clear();
            done.extend_from_slice(&cands);
            if let Some(&(x, _)) = cands.last() {
                t_p = t_p.max(x);
            }
            let mut starting = Vec::new();
            while let Some(&Start(x, id)) = self.starts.peek() {
                if x > limit {
                    break;
                }
                self.starts.pop();
                starting.push(id);
                t_p = t_p.max(x);
            }
            // Everything in the window takes effect at t_p.
            let dt = t_p - now;
            self.now = t_p;
            for &(x, f) in &done {
                self.remaining[f as usize] = -1.0; // marker: remove
                self.fair.remove(f, &flows.link_off, &flows.links);
                self.count_large(f, -1);
                let tid = flows.transfer[f as usize];
                self.flows_left[tid as usize] -= 1;
                if self.flows_left[tid as usize] == 0 {
                    self.complete(tid, x);
                }
            }
            // One pass: drop finished flows, advance the others to t_p.
            let (remaining, fair) = (&mut self.remaining, &self.fair);
            self.active.retain(|&f| {
                let r = &mut remaining[f as usize];
                if *r < 0.0 {
                    return false;
                }
                *r = (*r - fair.rate(f) * dt).max(0.0);
                true
            });
            dirty |= !done.is_empty();
            let before = self.active.len();
            for id in starting {
                self.begin(id);
            }
            if self.active.len() != before {
                dirty = true;
            }
        }
        if self.completed != self.plan.transfers.len() {
            let stuck = (0..self.plan.transfers.len()).find(|&i| self.end[i].is_nan()).unwrap_or(0);
            return Err(format!(
                "plan cannot finish: transfer {stuck} never became ready ({} of {} transfers completed); a dependency points to a later step under barrier_steps?",
                self.completed,
                self.plan.transfers.len()
            ));
        }
        Ok(Timeline { start: self.start, end: self.end, windows, recomputations })
    }
}
