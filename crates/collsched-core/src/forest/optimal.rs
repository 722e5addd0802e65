//! Exact allgather optimality (ForestColl §4, §5.2, appendix E.1).
//!
//! 1/x* = max over cuts S ⊉ Vc of |S ∩ Vc| / B+(S). Instead of bisecting on floats we run a
//! parametric (Dinkelbach/Newton) search on exact ratios: test r = n/B with the auxiliary
//! network of Theorem 1 (source s, edge s->c of capacity B for every compute node c, every
//! link scaled by n) — all cuts satisfy the ratio iff F(s, v) >= N·B for every compute v.
//! A violating v yields a min cut S with a strictly larger ratio, which becomes the next r.
//! The ratio only grows and there are finitely many, so the loop ends at 1/x* exactly,
//! with the bottleneck cut as a witness.
use super::ratio::{gcd64, Ratio};
use crate::error::{Error, Result};
use crate::flow::{FlowNetwork, INF};
use crate::invalid;
use crate::topology::graph::Graph;

/// The optimum of a graph, in the paper's normalisation: each compute node broadcasts
/// x* bytes/s over k trees of y bytes/s each (x* = k·y); algbw = N·x*.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Optimum {
    /// 1/x* in seconds per byte.
    pub inv_x: Ratio,
    /// x*: per-root broadcast bandwidth, bytes/s.
    pub x: Ratio,
    /// N·x*: allgather algorithmic bandwidth (output bytes per second), bytes/s.
    pub algbw: Ratio,
    /// Trees per root for exact optimality (smallest such k).
    pub k: u64,
    /// Bandwidth per tree y = x*/k, bytes/s.
    pub tree_bw: Ratio,
    /// A bottleneck cut S (graph node ids): |S ∩ Vc| / B+(S) = 1/x*.
    pub bottleneck: Vec<u32>,
    /// gcd of all link bandwidths (the unit capacities are normalised by).
    pub unit: u64,
    /// U = 1/y in normalised units: scaled capacity of a link is U·b_e/unit.
    pub scale: u64,
}

/// Normalised view: link capacities divided by their gcd.
pub(crate) fn normalised(g: &Graph) -> (u64, Vec<(u32, u32, u64)>) {
    let unit = g.links.iter().fold(0u64, |a, l| gcd64(a, l.bw)).max(1);
    (unit, g.links.iter().map(|l| (l.src, l.dst, l.bw / unit)).collect())
}

fn overflow() -> Error {
    Error::Unsupported("link bandwidths too large for exact 64-bit flow arithmetic (their gcd-normalised values overflow)".into())
}

/// Check every cut against ratio n/B; return a violating cut (node set) if any.
fn violating_cut(g: &Graph, links: &[(u32, u32, u64)], n: u64, b: u64, order: &mut Vec<u32>) -> Result<Option<Vec<u32>>> {
    let nn = g.num_nodes();
    let comp = g.compute_nodes();
    let need = (comp.len() as u64).checked_mul(b).ok_or_else(overflow)?;
    if need >= INF / 2 {
        return Err(overflow());
    }
    let mut net = FlowNetwork::new(nn + 1);
    let s = nn as u32;
    for &(u, v, c) in links {
        let c = c.checked_mul(n).ok_or_else(overflow)?;
        if c >= INF / 2 {
            return Err(overflow());
        }
        net.add_edge(u, v, c);
    }
    for &c in &comp {
        net.add_edge(s, c, b);
    }
    for i in 0..order.len() {
        let v = order[i];
        net.reset();
        let f = net.max_flow(s, v, need);
        if f < need {
            // Test this sink first next time: violations tend to repeat.
            order.remove(i);
            order.insert(0, v);
            let side = net.source_side(s);
            return Ok(Some((0..nn as u32).filter(|&x| side[x as usize]).collect()));
        }
    }
    Ok(None)
}

/// |S ∩ Vc| and B+(S) (normalised) of a node set.
fn cut_ratio(g: &Graph, links: &[(u32, u32, u64)], set: &[u32]) -> (u64, u64) {
    let mut inside = vec![false; g.num_nodes()];
    for &v in set {
        inside[v as usize] = true;
    }
    let n = set.iter().filter(|&&v| g.is_compute(v)).count() as u64;
    let b = links.iter().filter(|l| inside[l.0 as usize] && !inside[l.1 as usize]).map(|l| l.2).sum();
    (n, b)
}

pub fn optimal(g: &Graph) -> Result<Optimum> {
    g.validate()?;
    let comp = g.compute_nodes();
    if comp.len() < 2 {
        return invalid!("graph '{}' needs at least two compute nodes for a collective", g.name);
    }
    let (unit, links) = normalised(g);
    // Start from the best single-node cut V - {v}: ratio (N-1)/B-(v).
    let mut best: Option<(u64, u64, Vec<u32>)> = None;
    for &v in &comp {
        let set: Vec<u32> = (0..g.num_nodes() as u32).filter(|&x| x != v).collect();
        let (n, b) = cut_ratio(g, &links, &set);
        let better = match &best {
            None => true,
            Some((bn, bb, _)) => (n as u128) * (*bb as u128) > (*bn as u128) * (b as u128),
        };
        if better {
            best = Some((n, b, set));
        }
    }
    let (mut n, mut b, mut set) = best.expect("at least two compute nodes");
    let mut order = comp.clone();
    while let Some(cut) = violating_cut(g, &links, n, b, &mut order)? {
        let (cn, cb) = cut_ratio(g, &links, &cut);
        debug_assert!((cn as u128) * (b as u128) > (n as u128) * (cb as u128));
        n = cn;
        b = cb;
        set = cut;
    }
    let inv = Ratio::new(n as u128, b as u128); // normalised: p/q
    let (p, q) = (inv.num, inv.den);
    // Appendix E.1: U = p / gcd(q, {b_e}) and k = U x*; the normalised b_e have gcd 1.
    let gq = links.iter().fold(q, |a, l| super::ratio::gcd(a, l.2 as u128));
    let scale = p / gq;
    let k = (q / gq) as u64;
    let x = Ratio::new(q * unit as u128, p);
    Ok(Optimum {
        inv_x: x.recip(),
        x,
        algbw: x.mul_int(comp.len() as u128),
        k,
        tree_bw: Ratio::new(gq * unit as u128, p),
        bottleneck: set,
        unit,
        scale: scale as u64,
    })
}

/// 1/x* by enumerating every cut (small graphs only, for tests): max |S ∩ Vc| / B+(S).
pub fn brute_force_inv_x(g: &Graph) -> Result<Ratio> {
    let nn = g.num_nodes();
    if nn > 20 {
        return invalid!("brute force is for graphs of at most 20 nodes");
    }
    let comp_mask: u32 = g.compute_nodes().iter().fold(0, |m, &v| m | (1 << v));
    let mut best = Ratio::zero();
    for mask in 1u32..(1 << nn) {
        if mask & comp_mask == comp_mask {
            continue;
        }
        let n = (mask & comp_mask).count_ones() as u128;
        if n == 0 {
            continue;
        }
        let b: u128 = g.links.iter().filter(|l| mask >> l.src & 1 == 1 && mask >> l.dst & 1 == 0).map(|l| l.bw as u128).sum();
        if b == 0 {
            return invalid!("graph is disconnected");
        }
        let r = Ratio::new(n, b);
        if r > best {
            best = r;
        }
    }
    Ok(best)
}
