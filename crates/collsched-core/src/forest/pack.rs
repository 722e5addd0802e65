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

/// Pack k spanning out-trees per node of the compute-only graph `caps` (node ids 0..n).
pub fn pack(n: usize, caps: &BTreeMap<(u32, u32), u64>, k: u64) -> Result<(Vec<Batch>, PackStats)> {
    let elist: Vec<(u32, u32)> = caps.iter().filter(|e| *e.1 > 0).map(|e| *e.0).collect();
    let mut gcap: Vec<u64> = caps.values().copied().filter(|&c| c > 0).collect();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &(a, _)) in elist.iter().enumerate() {
        out[a as usize].push(i);
    }
    let mut states: Vec<State> = (0..n as u32)
        .map(|r| {
            let mut in_tree = vec![false; n];
            in_tree[r as usize] = true;
            State { root: r, mult: k, in_tree, order: vec![r], edges: Vec::new() }
        })
        .collect();
    let mut stats = PackStats { mu_flows: 0, batch_splits: 0 };
    let mut cur = 0;
    while cur < states.len() {
        if states[cur].complete() {
            cur += 1;
            continue;
        }
        let mut mu = build_net(n, &elist, &gcap, &states, cur);
        let mut failed: BTreeSet<usize> = BTreeSet::new();
        let mut progress_in_scan = false;
        let mut pos = 0;
        while !states[cur].complete() {
            if pos >= states[cur].order.len() {
                if !progress_in_scan {
                    return Err(Error::Unsupported(format!(
                        "tree packing found no edge to extend a tree rooted at {}: k trees per root are infeasible on this graph",
                        states[cur].root
                    )));
                }
                progress_in_scan = false;
                pos = 0;
                continue;
            }
            let x = states[cur].order[pos];
            for &ei in &out[x as usize] {
                let y = elist[ei].1;
                if gcap[ei] == 0 || states[cur].in_tree[y as usize] || failed.contains(&ei) {
                    continue;
                }
                let m1 = states[cur].mult;
                let cap = gcap[ei].min(m1);
                let need = mu.others + cap;
                mu.net.set_capacity(mu.src_ids[x as usize], INF);
                mu.net.reset();
                stats.mu_flows += 1;
                let f = mu.net.max_flow(mu.super_src, y, need);
                mu.net.set_capacity(mu.src_ids[x as usize], 0);
                let amount = cap.min(f.saturating_sub(mu.others));
                if amount == 0 {
                    failed.insert(ei);
                    continue;
                }
                if amount < m1 {
                    // Split: the rest of the batch keeps the old vertex set.
                    stats.batch_splits += 1;
                    let st = &states[cur];
                    let rest = State { root: st.root, mult: m1 - amount, in_tree: st.in_tree.clone(), order: st.order.clone(), edges: st.edges.clone() };
                    states.push(rest);
                    states[cur].mult = amount;
                }
                let st = &mut states[cur];
                st.in_tree[y as usize] = true;
                st.order.push(y);
                st.edges.push((x, y));
                gcap[ei] -= amount;
                progress_in_scan = true;
                if amount < m1 {
                    // The new batch is one of the others now: rebuild and forget failures.
                    mu = build_net(n, &elist, &gcap, &states, cur);
                    failed.clear();
                } else {
                    mu.net.set_capacity(mu.edge_ids[ei], gcap[ei]);
                }
                if states[cur].complete() {
                    break;
                }
            }
            pos += 1;
        }
        cur += 1;
    }
    let batches = states.into_iter().map(|s| Batch { root: s.root, mult: s.mult, edges: s.edges }).collect();
    Ok((batches, stats))
}
