//! Switch removal by edge splitting (ForestColl §5.3, appendix E.2, Algorithm 3).
//!
//! Works on the scaled integer graph D (capacity = number of trees a link carries) and k.
//! Feasibility of k trees per compute root is "sur(S) = c(S, S̄) − k|S ∩ Vc| >= 0 for every
//! S ⊉ Vc" (Theorem 8 in flow form: F(s, v; D_k) >= N·k). Splitting γ units of (u,w),(w,t)
//! into (u,t) lowers c(S, S̄) by γ exactly for the cuts with u,t ∈ S, w ∉ S or w ∈ S,
//! u,t ∉ S, so the safe amount is Theorem 6's γ: the least surplus over those two cut
//! families, each computed as min over compute v of a max-flow in D̂_{(u,w),v} / D̂_{(w,t),v}.
//!
//! Three shortcuts avoid most of those N max-flows, each exact:
//! * A local bound: for S with u,t ∈ S, w ∉ S, sur(S) is at least
//!   sur(S + w) + c(S, w) − c(w, S̄ − w), so at least c(u,w) + c(t,w) − (out(w) − c(w,t) −
//!   c(w,u)) (w is a switch, so S + w is a valid cut); symmetrically for the other family.
//!   If it covers min(c(u,w), c(w,t)), no flow is needed.
//! * One flow without the "some compute node outside" condition: a lower bound for every v;
//!   if it covers the amount, done; if its largest sink side holds a compute node, it is exact.
//! * Otherwise the per-v flows, each augmenting the shared flow only as far as needed.
//!
//! Every split records which physical path the new logical capacity stands for, so trees on
//! the compute-only graph map back to routes through switches (`segments`).
use crate::error::{Error, Result};
use crate::flow::{FlowNetwork, INF};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A run of `amount` units of a logical edge realised by the physical node path `path`.
pub type Segment = (u64, Vec<u32>);

pub struct SplitResult {
    /// Compute-only logical edges (graph node ids) and their capacities.
    pub caps: BTreeMap<(u32, u32), u64>,
    /// For each logical edge, the physical paths its capacity stands for (amounts sum to the capacity).
    pub segments: BTreeMap<(u32, u32), VecDeque<Segment>>,
    /// Counters for reports: split operations, γ computations, max-flows run.
    pub splits: u64,
    pub gammas: u64,
    pub flows: u64,
}

struct Splitter {
    n: usize,
    spread_fan: u64,
    boxes: Vec<Option<u32>>,
    compute: Vec<bool>,
    comp: Vec<u32>,
    nk: u64,
    k: u64,
    caps: BTreeMap<(u32, u32), u64>,
    rin: BTreeSet<(u32, u32)>,
    segs: BTreeMap<(u32, u32), VecDeque<Segment>>,
    gammas: u64,
    flows: u64,
    splits: u64,
}

/// Switches with more in-neighbours than this are split without spreading.
const SPREAD_MAX_PORTS: usize = 16;

/// Placeholder for the auxiliary source s in edge lists.
const S: u32 = u32::MAX;

impl Splitter {
    fn cap(&self, a: u32, b: u32) -> u64 {
        self.caps.get(&(a, b)).copied().unwrap_or(0)
    }
    fn outs(&self, w: u32) -> Vec<u32> {
        self.caps.range((w, 0)..(w + 1, 0)).filter(|e| *e.1 > 0).map(|e| e.0 .1).collect()
    }
    fn ins(&self, w: u32) -> Vec<u32> {
        self.rin.range((w, 0)..(w + 1, 0)).map(|e| e.1).collect()
    }
    fn add(&mut self, a: u32, b: u32, delta: u64) {
        *self.caps.entry((a, b)).or_insert(0) += delta;
        self.rin.insert((b, a));
    }
    fn sub(&mut self, a: u32, b: u32, delta: u64) {
        let c = self.caps.get_mut(&(a, b)).expect("edge exists");
        *c -= delta;
        if *c == 0 {
            self.caps.remove(&(a, b));
            self.rin.remove(&(b, a));
        }
    }

    /// D_k: the current graph plus source s (node n) with an edge of capacity k to every compute node.
    fn base_network(&self) -> FlowNetwork {
        let mut net = FlowNetwork::new(self.n + 1);
        for (&(a, b), &c) in &self.caps {
            net.add_edge(a, b, c);
        }
        for &c in &self.comp {
            net.add_edge(self.n as u32, c, self.k);
        }
        net
    }

    /// min(amount, min over valid cuts of the family of (cut capacity − N·k)), the cuts being
    /// those of the flow src -> sink with the `extras` made uncuttable and at least one compute
    /// node on the sink side (forced in turn with an uncuttable edge v -> sink).
    fn family_slack(&mut self, src: u32, sink: u32, extras: &[(u32, u32)], forced_source: &[u32], sink_always_valid: bool, amount: u64) -> u64 {
        let s = self.n as u32;
        let map = |x: u32| if x == S { s } else { x };
        let mut net = self.base_network();
        for &(a, b) in extras {
            net.add_edge(map(a), map(b), INF);
        }
        // Uncuttable v -> sink edges for the per-v fallback, inert (capacity 0) for now.
        let candidates: Vec<u32> = if sink_always_valid { Vec::new() } else { self.comp.iter().copied().filter(|v| !forced_source.contains(v)).collect() };
        let ids: Vec<usize> = candidates.iter().map(|&v| net.add_edge(v, sink, 0)).collect();
        let need = self.nk + amount;
        self.flows += 1;
        let f = net.max_flow(src, sink, need);
        if f >= need {
            return amount;
        }
        if sink_always_valid {
            return f.saturating_sub(self.nk).min(amount);
        }
        let side = net.source_side(src);
        if self.comp.iter().any(|&c| !side[c as usize]) {
            return f.saturating_sub(self.nk).min(amount);
        }
        // Every min cut holds only switches on the sink side: force each compute node there
        // in turn. The max flow f to the sink is a valid start for every v, so each v only
        // needs the few units beyond f (usually one or two augmenting paths).
        let base = net.snapshot();
        let mut best = amount;
        for &id in &ids {
            net.restore(&base);
            net.set_residual(id, INF);
            self.flows += 1;
            let extra = net.max_flow(src, sink, (self.nk + best).saturating_sub(f));
            best = best.min((f + extra).saturating_sub(self.nk));
            if best == 0 {
                break;
            }
        }
        best
    }

    /// Theorem 6: the largest γ such that splitting γ units of (u,w),(w,t) keeps k trees per root.
    /// Theorem 6's γ, capped at `limit` (a smaller cap makes the flows cheaper).
    fn gamma(&mut self, u: u32, w: u32, t: u32, limit: u64) -> u64 {
        self.gammas += 1;
        let (cuw, cwt) = (self.cap(u, w), self.cap(w, t));
        let mut g = cuw.min(cwt).min(limit);
        if g == 0 {
            return 0;
        }
        let distinct = u != t;
        let (ctw, cwu) = if distinct { (self.cap(t, w), self.cap(w, u)) } else { (0, 0) };
        let in_w: u64 = self.ins(w).iter().map(|&x| self.cap(x, w)).sum();
        let out_w: u64 = self.outs(w).iter().map(|&x| self.cap(w, x)).sum();
        let lb1 = (cuw + ctw) as i128 - (out_w - cwt - cwu) as i128;
        let lb2 = (cwt + cwu) as i128 - (in_w - cuw - ctw) as i128;
        if lb1 < g as i128 {
            // Cuts with u, t ∈ S and w ∉ S: flow u -> w with u->s, u->t uncuttable.
            g = self.family_slack(u, w, &[(u, S), (u, t)], &[u, t], false, g);
        }
        if g > 0 && lb2 < g as i128 {
            // Cuts with w ∈ S and u, t ∉ S: flow w -> t with w->s, u->t uncuttable.
            let valid = self.compute[u as usize] || self.compute[t as usize];
            g = self.family_slack(w, t, &[(w, S), (u, t)], &[], valid, g);
        }
        g
    }

    fn split(&mut self, u: u32, w: u32, t: u32, g: u64) {
        self.splits += 1;
        self.sub(u, w, g);
        self.sub(w, t, g);
        let first = take(self.segs.get_mut(&(u, w)).expect("segments"), g);
        let second = take(self.segs.get_mut(&(w, t)).expect("segments"), g);
        if u == t {
            return; // a self-loop carries nothing useful
        }
        self.add(u, t, g);
        let joined = join(first, second);
        self.segs.entry((u, t)).or_default().extend(joined);
    }

    fn distinct_neighbours(&self, w: u32) -> usize {
        let mut s: BTreeSet<u32> = self.outs(w).into_iter().collect();
        s.extend(self.ins(w));
        s.len()
    }

    fn remove_switch(&mut self, w: u32) -> Result<()> {
        let boxes = self.boxes.clone();
        let bx = |v: u32| boxes[v as usize];
        for t in self.outs(w) {
            let mut ins = self.ins(w);
            // Prefer u != t (u -> w -> u only makes a useless self-loop), then u in another box
            // than t when w is outside t's box (a same-box pair through a network switch would
            // spend scale-out bandwidth on scale-up traffic), then the nodes after t in id order
            // (a rotation: node t's partners differ from node t+1's).
            let n = self.n as u32;
            ins.sort_by_key(|&u| (u == t, bx(u).is_some() && bx(u) == bx(t) && bx(w) != bx(t), (u + n - t) % n));
            // First pass: spread t's capacity over up to `spread_fan` partners when w is a small
            // switch inside a box (a complete logical graph there keeps trees shallow; network
            // switches are left alone: many ports cost many γ, and partial splits there can
            // leave only same-box partners at the end), then split fully.
            let eligible = ins.iter().filter(|&&u| u != t).count().max(1) as u64;
            let fan = if bx(w).is_some() && ins.len() <= SPREAD_MAX_PORTS { eligible.min(self.spread_fan.max(1)) } else { 1 };
            let quota = self.cap(w, t).div_ceil(fan);
            for pass_limit in [quota, u64::MAX] {
                for &u in &ins {
                    if self.cap(w, t) == 0 {
                        break;
                    }
                    if self.cap(u, w) == 0 || (pass_limit != u64::MAX && u == t) {
                        continue;
                    }
                    let g = self.gamma(u, w, t, pass_limit);
                    if g > 0 {
                        self.split(u, w, t, g);
                    }
                }
            }
            if self.cap(w, t) != 0 {
                return Err(Error::Unsupported(format!(
                    "edge splitting could not bypass switch node {w} towards node {t}: the scaled graph is not Eulerian or k trees per root are infeasible"
                )));
            }
        }
        if !self.ins(w).is_empty() {
            return Err(Error::Unsupported(format!("switch node {w} kept ingress after all its egress was split off (graph not Eulerian)")));
        }
        Ok(())
    }
}

/// Take `amount` units from the front of a segment queue.
pub(crate) fn take(q: &mut VecDeque<Segment>, mut amount: u64) -> Vec<Segment> {
    let mut out = Vec::new();
    while amount > 0 {
        let front = q.front_mut().expect("segments cover the capacity");
        if front.0 <= amount {
            amount -= front.0;
            out.push(q.pop_front().unwrap());
        } else {
            front.0 -= amount;
            out.push((amount, front.1.clone()));
            amount = 0;
        }
    }
    out
}

/// Pair two equal-total segment lists into concatenated paths.
fn join(a: Vec<Segment>, b: Vec<Segment>) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    let (mut i, mut j) = (0, 0);
    let (mut ra, mut rb) = (a.first().map(|x| x.0).unwrap_or(0), b.first().map(|x| x.0).unwrap_or(0));
    while i < a.len() && j < b.len() {
        let m = ra.min(rb);
        let mut p = a[i].1.clone();
        p.extend_from_slice(&b[j].1[1..]);
        match out.last_mut() {
            Some(last) if last.1 == p => last.0 += m,
            _ => out.push((m, p)),
        }
        ra -= m;
        rb -= m;
        if ra == 0 {
            i += 1;
            ra = a.get(i).map(|x| x.0).unwrap_or(0);
        }
        if rb == 0 {
            j += 1;
            rb = b.get(j).map(|x| x.0).unwrap_or(0);
        }
    }
    out
}

/// Remove every switch node of the scaled graph (`edges`: (src, dst, trees it can carry)).
/// `boxes[v]` is node v's server (pairing prefers routes that stay consistent with boxes).
/// `spread_fan` > 1 first spreads each egress of a small switch over that many partners.
pub fn remove_switches(n: usize, compute: &[bool], boxes: &[Option<u32>], edges: &[(u32, u32, u64)], k: u64, spread_fan: u64) -> Result<SplitResult> {
    let comp: Vec<u32> = (0..n as u32).filter(|&v| compute[v as usize]).collect();
    let mut sp = Splitter {
        n,
        spread_fan,
        boxes: boxes.to_vec(),
        compute: compute.to_vec(),
        nk: comp.len() as u64 * k,
        comp,
        k,
        caps: BTreeMap::new(),
        rin: BTreeSet::new(),
        segs: BTreeMap::new(),
        gammas: 0,
        flows: 0,
        splits: 0,
    };
    for &(a, b, c) in edges {
        if c > 0 {
            sp.add(a, b, c);
            sp.segs.entry((a, b)).or_default().push_back((c, vec![a, b]));
        }
    }
    let mut pending: Vec<u32> = (0..n as u32).filter(|&v| !compute[v as usize]).collect();
    while !pending.is_empty() {
        // Remove the switch with the fewest neighbours first (NICs before fabrics): cheap and short paths.
        let (i, _) = pending.iter().enumerate().min_by_key(|(_, &w)| (sp.distinct_neighbours(w), w)).unwrap();
        let w = pending.remove(i);
        sp.remove_switch(w)?;
    }
    Ok(SplitResult { caps: sp.caps, segments: sp.segs, splits: sp.splits, gammas: sp.gammas, flows: sp.flows })
}
