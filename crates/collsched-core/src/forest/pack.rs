//! Spanning out-tree packing with multiplicities (ForestColl §5.4, appendix E.3,
//! Algorithm 4, after Bérczi & Frank / Schrijver).
//!
//! Trees are built in batches: a batch is `mult` identical out-trees sharing a root and a
//! growing vertex set R. Adding edge (x, y) (x ∈ R, y ∉ R) to μ of them keeps the rest of
//! the packing feasible iff μ <= min{g(x,y), m(R), F(x, y; D̄) − Σ_{i≠1} m(R_i)}
//! (Theorem 10), where D̄ adds one node s_R per other batch vertex set, fed from x with
//! capacity m(R) and feeding every node of R with an uncuttable edge. If μ < m(R) the batch
//! splits. Batches with equal vertex sets share one s_R node; complete batches (R = V)
//! always contribute exactly m(R) and are left out of both sides.
use crate::error::{Error, Result};
use crate::flow::{FlowNetwork, INF};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub root: u32,
    pub mult: u64,
    /// Tree edges in insertion order (each edge's tail is already in the tree).
    pub edges: Vec<(u32, u32)>,
}

struct State {
    root: u32,
    mult: u64,
    in_tree: Vec<bool>,
    order: Vec<u32>,
    edges: Vec<(u32, u32)>,
}

impl State {
    fn complete(&self) -> bool {
        self.order.len() == self.in_tree.len()
    }
}

pub struct PackStats {
    pub mu_flows: u64,
    pub batch_splits: u64,
}

struct MuNet {
    net: FlowNetwork,
    super_src: u32,
    edge_ids: Vec<usize>,
    src_ids: Vec<usize>,
    others: u64,
}

fn build_net(n: usize, elist: &[(u32, u32)], gcap: &[u64], states: &[State], current: usize) -> MuNet {
    let mut groups: BTreeMap<Vec<u32>, u64> = BTreeMap::new();
    for (i, st) in states.iter().enumerate() {
        if i == current || st.complete() {
            continue;
        }
        let mut key = st.order.clone();
        key.sort_unstable();
        *groups.entry(key).or_insert(0) += st.mult;
    }
    let mut net = FlowNetwork::new(n + 1);
    let super_src = n as u32;
    let edge_ids = elist.iter().zip(gcap).map(|(&(a, b), &c)| net.add_edge(a, b, c)).collect();
    let src_ids = (0..n as u32).map(|v| net.add_edge(super_src, v, 0)).collect();
    let mut others = 0;
    for (set, m) in groups {
        let s = net.add_node();
        net.add_edge(super_src, s, m);
        for v in set {
            net.add_edge(s, v, INF);
        }
        others += m;
    }
    MuNet { net, super_src, edge_ids, src_ids, others }
}

/// How trees grow. `Sequential` completes one batch before the next (Algorithm 4 as
/// written, fewest max-flows). `Interleaved` takes turns: each incomplete batch in turn
/// adds every feasible edge out of its earliest-added vertex that has one (the root
/// first, then in BFS order), then yields. The
/// first trees no longer take all the short edges, so the trees come out shallower (h100:2
/// max depth 6 → 3, a100:2 5 → 3, mi250:2 21 → 11): a store-and-forward pipeline drains
/// one piece per level, so this is worth about 1% at the optimum on h100:2 (docs/forestcoll.md).
/// Each turn rebuilds the μ network, so it costs generation time on large graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    Sequential,
    Interleaved,
}

struct Packer<'a> {
    n: usize,
    elist: Vec<(u32, u32)>,
    gcap: Vec<u64>,
    out: Vec<Vec<usize>>,
    states: Vec<State>,
    stats: &'a mut PackStats,
}

impl Packer<'_> {
    fn net(&self, cur: usize) -> MuNet {
        build_net(self.n, &self.elist, &self.gcap, &self.states, cur)
    }

    /// Add edge `ei` = (x, y) to as many trees of batch `cur` as keeps the packing feasible
    /// (Theorem 10's μ); the rest of the batch splits off. Returns false if μ = 0.
    fn extend(&mut self, cur: usize, mu: &mut MuNet, ei: usize) -> bool {
        let (x, y) = self.elist[ei];
        let m1 = self.states[cur].mult;
        let cap = self.gcap[ei].min(m1);
        let need = mu.others + cap;
        mu.net.set_capacity(mu.src_ids[x as usize], INF);
        mu.net.reset();
        self.stats.mu_flows += 1;
        let f = mu.net.max_flow(mu.super_src, y, need);
        mu.net.set_capacity(mu.src_ids[x as usize], 0);
        let amount = cap.min(f.saturating_sub(mu.others));
        if amount == 0 {
            return false;
        }
        if amount < m1 {
            // Split: the rest of the batch keeps the old vertex set.
            self.stats.batch_splits += 1;
            let st = &self.states[cur];
            let rest = State { root: st.root, mult: m1 - amount, in_tree: st.in_tree.clone(), order: st.order.clone(), edges: st.edges.clone() };
            self.states.push(rest);
            self.states[cur].mult = amount;
        }
        let st = &mut self.states[cur];
        st.in_tree[y as usize] = true;
        st.order.push(y);
        st.edges.push((x, y));
        self.gcap[ei] -= amount;
        if amount < m1 {
            // The new batch is one of the others now.
            *mu = self.net(cur);
        } else {
            mu.net.set_capacity(mu.edge_ids[ei], self.gcap[ei]);
        }
        true
    }

    /// Candidate edges out of `x` for batch `cur`: capacity left, head not yet in the tree.
    fn candidates(&self, cur: usize, x: u32) -> Vec<usize> {
        let st = &self.states[cur];
        self.out[x as usize].iter().copied().filter(|&ei| self.gcap[ei] > 0 && !st.in_tree[self.elist[ei].1 as usize]).collect()
    }

    fn stuck(&self, cur: usize) -> Error {
        Error::Unsupported(format!(
            "tree packing found no edge to extend a tree rooted at {}: k trees per root are infeasible on this graph",
            self.states[cur].root
        ))
    }

    /// Algorithm 4 for one batch: scan its vertices in order, adding every feasible edge,
    /// until it spans the graph.
    fn complete(&mut self, cur: usize) -> Result<()> {
        let mut mu = self.net(cur);
        let mut failed: BTreeSet<usize> = BTreeSet::new();
        let mut progress_in_scan = false;
        let mut pos = 0;
        while !self.states[cur].complete() {
            if pos >= self.states[cur].order.len() {
                if !progress_in_scan {
                    return Err(self.stuck(cur));
                }
                progress_in_scan = false;
                pos = 0;
                continue;
            }
            let x = self.states[cur].order[pos];
            for ei in self.candidates(cur, x) {
                if failed.contains(&ei) || self.states[cur].in_tree[self.elist[ei].1 as usize] {
                    continue;
                }
                let before = self.states.len();
                if !self.extend(cur, &mut mu, ei) {
                    failed.insert(ei);
                    continue;
                }
                if self.states.len() != before {
                    failed.clear(); // the μ network was rebuilt
                }
                progress_in_scan = true;
                if self.states[cur].complete() {
                    break;
                }
            }
            pos += 1;
        }
        Ok(())
    }

    /// One turn of interleaved growth: the earliest-added vertex of batch `cur` with a
    /// feasible edge adds all of its feasible edges.
    fn turn(&mut self, cur: usize) -> Result<()> {
        let mut mu = self.net(cur);
        let mut pos = 0;
        while pos < self.states[cur].order.len() {
            let x = self.states[cur].order[pos];
            let mut added = false;
            for ei in self.candidates(cur, x) {
                if !self.states[cur].in_tree[self.elist[ei].1 as usize] && self.extend(cur, &mut mu, ei) {
                    added = true;
                }
            }
            if added {
                return Ok(());
            }
            pos += 1;
        }
        Err(self.stuck(cur))
    }
}

/// Pack k spanning out-trees per node of the compute-only graph `caps` (node ids 0..n).
pub fn pack(n: usize, caps: &BTreeMap<(u32, u32), u64>, k: u64, growth: Growth) -> Result<(Vec<Batch>, PackStats)> {
    let elist: Vec<(u32, u32)> = caps.iter().filter(|e| *e.1 > 0).map(|e| *e.0).collect();
    let gcap: Vec<u64> = caps.values().copied().filter(|&c| c > 0).collect();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &(a, _)) in elist.iter().enumerate() {
        out[a as usize].push(i);
    }
    let states: Vec<State> = (0..n as u32)
        .map(|r| {
            let mut in_tree = vec![false; n];
            in_tree[r as usize] = true;
            State { root: r, mult: k, in_tree, order: vec![r], edges: Vec::new() }
        })
        .collect();
    let mut stats = PackStats { mu_flows: 0, batch_splits: 0 };
    let mut p = Packer { n, elist, gcap, out, states, stats: &mut stats };
    match growth {
        Growth::Sequential => {
            let mut cur = 0;
            while cur < p.states.len() {
                if !p.states[cur].complete() {
                    p.complete(cur)?;
                }
                cur += 1;
            }
        }
        Growth::Interleaved => loop {
            let mut grew = false;
            let mut cur = 0;
            while cur < p.states.len() {
                if !p.states[cur].complete() {
                    p.turn(cur)?;
                    grew = true;
                }
                cur += 1;
            }
            if !grew {
                break;
            }
        },
    }
    let batches = p.states.into_iter().map(|s| Batch { root: s.root, mult: s.mult, edges: s.edges }).collect();
    Ok((batches, stats))
}
