//! Fixed-k schedules (ForestColl §5.5, appendix E.4, Algorithm 5).
//!
//! With k trees per root, a schedule of time (M/(N·k))·U exists iff the graph with
//! capacities ⌊U·b_e⌋ packs k trees per root (Theorems 11–12). Feasibility is monotone
//! in U and changes only at breakpoints j/b_e, so U* is a breakpoint: we bisect on exact
//! rationals until the interval is shorter than 1/max(b)² (two breakpoints are at least
//! that far apart) and snap to the largest breakpoint not above the feasible end.
use super::optimal::normalised;
use super::ratio::Ratio;
use crate::error::{Error, Result};
use crate::flow::FlowNetwork;
use crate::invalid;
use crate::topology::graph::Graph;

/// Whether capacities ⌊U·b_e⌋ (normalised b_e) admit k spanning out-trees per compute root.
pub(crate) fn feasible(g: &Graph, links: &[(u32, u32, u64)], u: &Ratio, k: u64) -> bool {
    let n = g.num_nodes();
    let comp = g.compute_nodes();
    let mut net = FlowNetwork::new(n + 1);
    for &(a, b, c) in links {
        let c = u.floor_mul(c as u128);
        if c > 0 {
            net.add_edge(a, b, c.min(u64::MAX as u128 / 8) as u64);
        }
    }
    for &c in &comp {
        net.add_edge(n as u32, c, k);
    }
    let need = comp.len() as u64 * k;
    comp.iter().all(|&v| {
        net.reset();
        net.max_flow(n as u32, v, need) >= need
    })
}

/// U* for k trees per root in normalised units (each tree then gets 1/U* of a unit of bandwidth).
pub fn fixed_k_scale(g: &Graph, k: u64) -> Result<Ratio> {
    g.validate()?;
    if k == 0 || k > 1 << 20 {
        return invalid!("k (trees per root) must be in 1..=2^20, got {k}");
    }
    let comp = g.compute_nodes();
    if comp.len() < 2 {
        return invalid!("graph '{}' needs at least two compute nodes for a collective", g.name);
    }
    let (_, links) = normalised(g);
    let maxb = links.iter().map(|l| l.2).max().unwrap_or(1) as u128;
    let min_in = comp.iter().map(|&v| links.iter().filter(|l| l.1 == v).map(|l| l.2 as u128).sum::<u128>()).min().unwrap();
    let nk = (comp.len() as u128 - 1) * k as u128;
    let mut lo = Ratio::new(nk, min_in);
    let mut hi = Ratio::int(nk.max(1));
    let mut doublings = 0;
    while !feasible(g, &links, &hi, k) {
        lo = hi;
        hi = hi.mul_int(2);
        doublings += 1;
        if doublings > 40 {
            return Err(Error::Unsupported(format!("no fixed-k = {k} schedule found")));
        }
    }
    let eps = Ratio::new(1, maxb * maxb);
    while hi.sub(&lo) >= eps {
        let mid = lo.add(&hi).half();
        if feasible(g, &links, &mid, k) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // The largest breakpoint j/b_e not above hi gives the same capacities as hi.
    let snapped = links.iter().map(|l| Ratio::new(hi.floor_mul(l.2 as u128), l.2 as u128)).max().unwrap();
    debug_assert!(feasible(g, &links, &snapped, k));
    Ok(snapped)
}
