//! The ForestColl pipeline: optimum -> scaled integer graph -> switch removal ->
//! tree packing -> trees mapped back onto physical paths, plus the multicast
//! post-processing (§5.6) and the checks the tests rely on.
use super::fixed_k::fixed_k_scale;
use super::optimal::{normalised, optimal, Optimum};
use super::pack::{pack, Growth};
use super::ratio::Ratio;
use super::split::{remove_switches, take, Segment};
use crate::error::{Error, Result};
use crate::invalid;
use crate::topology::graph::Graph;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

/// How many trees per root to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KChoice {
    /// The optimal k when it is below 10, else the best k in 1..=9 (paper §5.5).
    Auto,
    /// The k of exact optimality, however large.
    Optimal,
    /// Exactly this k, with the best bandwidth for it (Algorithm 5).
    Fixed(u64),
}

/// Knobs of schedule generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForestOptions {
    /// Edge splitting first spreads each egress of a small in-box switch (<= 16 ports, e.g. an
    /// NVSwitch) over up to this many partners, so the compute-only graph is dense inside a
    /// box and trees come out shallower (fewer pipeline steps). 1 = plain Algorithm 3 (one
    /// partner per egress, fastest). Costs generation time on large graphs.
    pub spread_fan: u64,
    /// How the packing grows trees (`pack::Growth`): interleaved trees are shallower,
    /// sequential ones cheaper to find.
    pub growth: Growth,
}

/// Most compute nodes for which `for_graph` interleaves tree growth (mi250:4, 64 GCDs:
/// 0.4 s → 1.8 s on the 2-core container; a100:8 0.04 → 0.1 s).
pub const INTERLEAVE_MAX_COMPUTE: usize = 64;

impl ForestOptions {
    /// Spreading on (fan 8) up to 256 compute nodes, off above; interleaved growth up to
    /// `INTERLEAVE_MAX_COMPUTE` compute nodes (generation time first above).
    pub fn for_graph(g: &Graph) -> ForestOptions {
        let n = g.num_compute();
        ForestOptions {
            spread_fan: if n <= 256 { 8 } else { 1 },
            growth: if n <= INTERLEAVE_MAX_COMPUTE { Growth::Interleaved } else { Growth::Sequential },
        }
    }
}

/// Largest k that `Auto` uses without scanning.
pub const AUTO_MAX_K: u64 = 9;

/// One tree edge between ranks and the physical route (graph node ids, src first, dst last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEdge {
    pub src: u32,
    pub dst: u32,
    pub path: Vec<u32>,
}

/// `multiplicity` identical out-trees rooted at rank `root`; edges parent-before-child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForestTree {
    pub root: u32,
    pub multiplicity: u64,
    pub edges: Vec<TreeEdge>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScheduleStats {
    pub optimal_s: f64,
    pub fixed_k_s: f64,
    pub removal_s: f64,
    pub packing_s: f64,
    pub splits: u64,
    pub gammas: u64,
    pub split_flows: u64,
    pub mu_flows: u64,
    pub batch_splits: u64,
}

#[derive(Debug, Clone)]
pub struct ForestSchedule {
    pub graph: Graph,
    /// Graph node id of each rank (compute nodes in graph order).
    pub ranks: Vec<u32>,
    pub k: u64,
    /// Bandwidth of one tree (bytes/s); a batch of multiplicity m gets m times this.
    pub tree_bw: Ratio,
    /// Allgather algbw of this schedule: N·k·tree_bw (bytes/s).
    pub algbw: Ratio,
    pub optimum: Optimum,
    pub trees: Vec<ForestTree>,
    pub generation_s: f64,
    pub stats: ScheduleStats,
}

fn rounded_is_eulerian(n: usize, links: &[(u32, u32, u64)], u: &Ratio) -> bool {
    let mut bal = vec![0i128; n];
    for &(a, b, c) in links {
        let v = u.floor_mul(c as u128) as i128;
        bal[a as usize] += v;
        bal[b as usize] -= v;
    }
    bal.iter().all(|&x| x == 0)
}

/// Build a schedule for `g` with the default options for its size.
pub fn schedule(g: &Graph, choice: KChoice) -> Result<ForestSchedule> {
    schedule_with(g, choice, &ForestOptions::for_graph(g))
}

/// Build a schedule for `g`.
pub fn schedule_with(g: &Graph, choice: KChoice, opts: &ForestOptions) -> Result<ForestSchedule> {
    let t0 = Instant::now();
    let opt = optimal(g)?;
    let mut stats = ScheduleStats { optimal_s: t0.elapsed().as_secs_f64(), ..Default::default() };
    let (unit, links) = normalised(g);
    let t1 = Instant::now();
    // (k, U) with U in normalised units: a link carries ⌊U·b_e⌋ trees.
    let (k, u) = match choice {
        KChoice::Optimal => (opt.k, Ratio::int(opt.scale as u128)),
        KChoice::Auto if opt.k <= AUTO_MAX_K => (opt.k, Ratio::int(opt.scale as u128)),
        KChoice::Fixed(k) if k == opt.k => (opt.k, Ratio::int(opt.scale as u128)),
        KChoice::Fixed(k) => (k, fixed_k_scale(g, k)?),
        KChoice::Auto => {
            // Small k whose rounded capacities stay Eulerian (edge splitting needs it); the
            // optimal k if none does.
            let mut best: Option<(u64, Ratio, Ratio)> = None; // (k, U, k/U)
            for k in 1..=AUTO_MAX_K {
                let u = fixed_k_scale(g, k)?;
                if !rounded_is_eulerian(g.num_nodes(), &links, &u) {
                    continue;
                }
                let tput = Ratio::int(k as u128).div(&u);
                if best.as_ref().is_none_or(|b| tput > b.2) {
                    best = Some((k, u, tput));
                }
            }
            match best {
                Some((k, u, _)) => (k, u),
                None => (opt.k, Ratio::int(opt.scale as u128)),
            }
        }
    };
    stats.fixed_k_s = t1.elapsed().as_secs_f64();
    let scaled: Vec<(u32, u32, u64)> = links
        .iter()
        .map(|&(a, b, c)| {
            let v = u.floor_mul(c as u128);
            (a, b, v.min(u64::MAX as u128) as u64)
        })
        .collect();
    if scaled.iter().any(|e| e.2 >= crate::flow::INF / 64) {
        return Err(Error::Unsupported("scaled capacities too large for 64-bit flows".into()));
    }
    let n = g.num_nodes();
    let mut bal = vec![0i128; n];
    for &(a, b, c) in &scaled {
        bal[a as usize] += c as i128;
        bal[b as usize] -= c as i128;
    }
    if let Some(v) = bal.iter().position(|&x| x != 0) {
        return Err(Error::Unsupported(format!(
            "with k = {k} the rounded link capacities are not Eulerian at node '{}' (links are not symmetric); edge splitting needs an Eulerian graph",
            g.name(v as u32)
        )));
    }
    let compute: Vec<bool> = (0..n as u32).map(|v| g.is_compute(v)).collect();
    let t2 = Instant::now();
    let boxes: Vec<Option<u32>> = g.nodes.iter().map(|nd| nd.box_id).collect();
    let split = remove_switches(n, &compute, &boxes, &scaled, k, opts.spread_fan)?;
    stats.removal_s = t2.elapsed().as_secs_f64();
    stats.splits = split.splits;
    stats.gammas = split.gammas;
    stats.split_flows = split.flows;
    let ranks = g.compute_nodes();
    let mut rank_of = vec![u32::MAX; n];
    for (r, &v) in ranks.iter().enumerate() {
        rank_of[v as usize] = r as u32;
    }
    let rank_caps: BTreeMap<(u32, u32), u64> = split.caps.iter().map(|(&(a, b), &c)| ((rank_of[a as usize], rank_of[b as usize]), c)).collect();
    let t3 = Instant::now();
    let (batches, pstats) = pack(ranks.len(), &rank_caps, k, opts.growth)?;
    stats.packing_s = t3.elapsed().as_secs_f64();
    stats.mu_flows = pstats.mu_flows;
    stats.batch_splits = pstats.batch_splits;
    let mut segments = split.segments;
    let mut trees = Vec::new();
    for b in batches {
        // A batch whose logical edge is realised by several routes splits into sub-batches.
        let mut parts: Vec<(u64, Vec<TreeEdge>)> = vec![(b.mult, Vec::with_capacity(b.edges.len()))];
        for &(x, y) in &b.edges {
            let key = (ranks[x as usize], ranks[y as usize]);
            let q: &mut VecDeque<Segment> = segments.get_mut(&key).expect("tree edge is a logical edge");
            let mut extra = Vec::new();
            for part in parts.iter_mut() {
                let mut routes = take(q, part.0).into_iter();
                let (first_amount, first_path) = routes.next().expect("a route");
                for (amount, path) in routes {
                    let mut edges = part.1.clone();
                    edges.push(TreeEdge { src: x, dst: y, path });
                    extra.push((amount, edges));
                }
                part.0 = first_amount;
                part.1.push(TreeEdge { src: x, dst: y, path: first_path });
            }
            parts.extend(extra);
        }
        for (m, edges) in parts {
            trees.push(ForestTree { root: b.root, multiplicity: m, edges });
        }
    }
    let tree_bw = Ratio::new(unit as u128, 1).div(&u);
    let algbw = tree_bw.mul_int(k as u128 * ranks.len() as u128);
    Ok(ForestSchedule { graph: g.clone(), ranks, k, tree_bw, algbw, optimum: opt, trees, generation_s: t0.elapsed().as_secs_f64(), stats })
}

impl ForestSchedule {
    pub fn num_ranks(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// Physical links a tree's data crosses. Without multicast switches this is every hop of
    /// every route. A switch flagged `multicast` replicates data itself (§5.6): once a tree's
    /// data has reached it, later routes of the same tree start from that switch instead of
    /// sending another copy into it.
    pub fn physical_links(&self, tree: &ForestTree) -> Vec<(u32, u32)> {
        let mut holding: BTreeSet<u32> = BTreeSet::new();
        let mut links = Vec::new();
        for e in &tree.edges {
            let start = e.path.iter().rposition(|v| holding.contains(v)).unwrap_or(0);
            for w in e.path[start..].windows(2) {
                links.push((w[0], w[1]));
            }
            for &v in &e.path[start..] {
                if self.graph.nodes[v as usize].multicast {
                    holding.insert(v);
                }
            }
        }
        links
    }

    /// Bandwidth each physical link carries (bytes/s) when every tree runs at its rate.
    pub fn link_loads(&self) -> BTreeMap<(u32, u32), Ratio> {
        let mut load: BTreeMap<(u32, u32), u128> = BTreeMap::new();
        for t in &self.trees {
            for l in self.physical_links(t) {
                *load.entry(l).or_insert(0) += t.multiplicity as u128;
            }
        }
        load.into_iter().map(|(l, m)| (l, self.tree_bw.mul_int(m))).collect()
    }

    /// Depth of every rank in a tree (root 0); `u32::MAX` if unreached.
    pub fn depths(&self, tree: &ForestTree) -> Vec<u32> {
        let mut d = vec![u32::MAX; self.ranks.len()];
        d[tree.root as usize] = 0;
        for e in &tree.edges {
            d[e.dst as usize] = d[e.src as usize].saturating_add(1);
        }
        d
    }

    pub fn max_depth(&self) -> u32 {
        self.trees.iter().map(|t| self.depths(t).into_iter().max().unwrap_or(0)).max().unwrap_or(0)
    }

    /// Check the schedule's invariants: each tree is an arborescence spanning every rank with
    /// valid physical routes, each root has k trees counted with multiplicity, and no link
    /// carries more than its capacity.
    pub fn check(&self) -> Result<()> {
        let n = self.ranks.len();
        let mut per_root = vec![0u64; n];
        for (i, t) in self.trees.iter().enumerate() {
            if t.multiplicity == 0 {
                return invalid!("tree {i} has multiplicity 0");
            }
            per_root[t.root as usize] += t.multiplicity;
            let mut reached = vec![false; n];
            reached[t.root as usize] = true;
            for e in &t.edges {
                if !reached[e.src as usize] || reached[e.dst as usize] {
                    return invalid!("tree {i} (root {}) is not an arborescence at edge {} -> {}", t.root, e.src, e.dst);
                }
                reached[e.dst as usize] = true;
                if e.path.first() != Some(&self.ranks[e.src as usize]) || e.path.last() != Some(&self.ranks[e.dst as usize]) {
                    return invalid!("tree {i}: route of {} -> {} does not join its endpoints", e.src, e.dst);
                }
                for w in e.path.windows(2) {
                    if self.graph.capacity(w[0], w[1]) == 0 {
                        return invalid!("tree {i}: route uses missing link {} -> {}", self.graph.name(w[0]), self.graph.name(w[1]));
                    }
                }
                if e.path[1..e.path.len() - 1].iter().any(|&v| self.graph.is_compute(v)) {
                    return invalid!("tree {i}: route of {} -> {} forwards through a compute node", e.src, e.dst);
                }
            }
            if reached.iter().any(|&r| !r) || t.edges.len() != n - 1 {
                return invalid!("tree {i} (root {}) does not span all ranks", t.root);
            }
        }
        if let Some(r) = per_root.iter().position(|&c| c != self.k) {
            return invalid!("root {r} has {} trees, expected k = {}", per_root[r], self.k);
        }
        for (&(a, b), load) in &self.link_loads() {
            let cap = Ratio::int(self.graph.capacity(a, b) as u128);
            if *load > cap {
                return invalid!("link {} -> {} carries {} B/s over its capacity {}", self.graph.name(a), self.graph.name(b), load, cap);
            }
        }
        Ok(())
    }
}
