//! General capacitated directed graphs of compute and switch nodes (ForestColl's input).
//!
//! Capacities are exact integers in bytes/s. A graph must be Eulerian (every node's
//! ingress equals its egress), have at least one compute node and have all compute
//! nodes in one connected piece. Switch nodes only forward (they own no data).
//!
//! Sources of graphs: JSON (`from_json`), the paper testbeds (`parse_preset("a100:2")`,
//! `mi250:N`, `h100:N`) and the lowering of a two-tier `Cluster` (`from_cluster`).
use crate::error::Result;
use crate::invalid;
use crate::topology::cluster::{Cluster, ScaleUp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// A GPU: owns data, is a rank of the collective.
    Compute,
    /// A switch (NVSwitch, NIC, IB switch): forwards only.
    Switch,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    /// The server ("box") the node sits in; `None` for network switches outside any box.
    #[serde(default, rename = "box", skip_serializing_if = "Option::is_none")]
    pub box_id: Option<u32>,
    /// Switch supports in-network multicast/aggregation (NVLink SHARP style).
    #[serde(default, skip_serializing_if = "is_false")]
    pub multicast: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One directed link of `bw` bytes/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Link {
    pub src: u32,
    pub dst: u32,
    pub bw: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    /// Directed links, at most one per ordered pair (parallel links are merged on construction).
    pub links: Vec<Link>,
}

const GBS: u64 = 1_000_000_000;

/// The MI250 Infinity Fabric adjacency of one 16-GCD box: (a, b, links) for a < b, 50 GB/s per
/// link and direction. Every GCD has 7 links; the two GCDs of one package share 4 links.
/// Source: the 2-box MI250 testbed of ForestColl (NSDI'26) §6.2.1, Figure 9(a).
const MI250_LINKS: &[(u32, u32, u64)] = &[
    (0, 1, 4), (0, 4, 2), (0, 8, 1),
    (1, 5, 1), (1, 9, 1), (1, 10, 1),
    (2, 3, 4), (2, 6, 1), (2, 9, 1), (2, 10, 1),
    (3, 7, 2), (3, 11, 1),
    (4, 5, 4), (4, 6, 1),
    (5, 6, 1), (5, 7, 1),
    (6, 7, 4),
    (8, 9, 4), (8, 12, 2),
    (9, 13, 1),
    (10, 11, 4), (10, 14, 1),
    (11, 15, 2),
    (12, 13, 4), (12, 14, 1),
    (13, 14, 1), (13, 15, 1),
    (14, 15, 4),
];

/// Paper testbed presets understood by `Graph::parse_preset` (others fall back to cluster specs).
pub const GRAPH_PRESETS: &[(&str, &str)] = &[
    ("a100", "DGX A100 boxes: 8 GPUs on one NVSwitch (300 GB/s), GPU i to NIC i (25 GB/s), even NICs to IB switch 0, odd to IB switch 1 (ForestColl §6.2.2)"),
    ("mi250", "MI250 boxes: 16 GCDs on the Infinity Fabric adjacency (50 GB/s per link, 7 links per GCD), every GCD to one IB switch at 16 GB/s (ForestColl §6.2.1)"),
    ("h100", "DGX H100 boxes: 8 GPUs on one NVSwitch (450 GB/s), GPU i to NIC i (50 GB/s), NIC i to rail switch i (ForestColl §6.3)"),
];

/// Accumulates links, merging parallel ones, then validates.
pub struct GraphBuilder {
    name: String,
    nodes: Vec<Node>,
    index: BTreeMap<String, u32>,
    caps: BTreeMap<(u32, u32), u64>,
}

impl GraphBuilder {
    pub fn new(name: &str) -> GraphBuilder {
        GraphBuilder { name: name.to_string(), nodes: Vec::new(), index: BTreeMap::new(), caps: BTreeMap::new() }
    }
    pub fn node(&mut self, name: &str, kind: NodeKind, box_id: Option<u32>, multicast: bool) -> Result<u32> {
        if name.is_empty() {
            return invalid!("graph node names must be non-empty");
        }
        if self.index.contains_key(name) {
            return invalid!("graph has two nodes named '{name}'");
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node { name: name.to_string(), kind, box_id, multicast });
        self.index.insert(name.to_string(), id);
        Ok(id)
    }
    pub fn id(&self, name: &str) -> Result<u32> {
        match self.index.get(name) {
            Some(&i) => Ok(i),
            None => invalid!("link names unknown node '{name}'"),
        }
    }
    pub fn link(&mut self, src: u32, dst: u32, bw: u64) -> Result<()> {
        if src == dst {
            return invalid!("self-loop on node '{}' is not allowed", self.nodes[src as usize].name);
        }
        if bw == 0 {
            return invalid!("link {} -> {} has zero bandwidth", self.nodes[src as usize].name, self.nodes[dst as usize].name);
        }
        let c = self.caps.entry((src, dst)).or_insert(0);
        *c = match c.checked_add(bw) {
            Some(v) => v,
            None => return invalid!("link bandwidth overflow"),
        };
        Ok(())
    }
    /// Link both directions with the same bandwidth.
    pub fn duplex(&mut self, a: u32, b: u32, bw: u64) -> Result<()> {
        self.link(a, b, bw)?;
        self.link(b, a, bw)
    }
    pub fn finish(self) -> Result<Graph> {
        let links = self.caps.into_iter().map(|((src, dst), bw)| Link { src, dst, bw }).collect();
        let g = Graph { name: self.name, nodes: self.nodes, links };
        g.validate()?;
        Ok(g)
    }
}

/// JSON shape: `{"name": .., "nodes": [{"name", "kind", "box"?, "multicast"?}], "links": [{"src", "dst", "bw"}]}`;
/// `bw` is bytes/s as an integer or a string with a unit ("300GB/s", "200Gbps").
#[derive(Serialize, Deserialize)]
struct GraphJson {
    #[serde(default)]
    name: String,
    nodes: Vec<Node>,
    links: Vec<LinkJson>,
}

#[derive(Serialize, Deserialize)]
struct LinkJson {
    src: String,
    dst: String,
    bw: BwJson,
}

/// Bytes/s as a JSON number, or a string with a unit; anything else is reported by
/// `link_bandwidth` naming the link (an untagged enum would leak serde's wording).
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
struct BwJson(serde_json::Value);

fn link_bandwidth(src: &str, dst: &str, bw: &BwJson) -> Result<u64> {
    let what = format!("graph JSON: link {src} -> {dst}: field 'bw'");
    match &bw.0 {
        serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(v), _, _) => Ok(v),
            (None, Some(v), _) if v < 0 => invalid!("{what} is {v}; bandwidths must be positive (bytes/s, or a string such as \"300GB/s\")"),
            (_, _, Some(f)) if f < 0.0 => invalid!("{what} is {n}; bandwidths must be positive (bytes/s, or a string such as \"300GB/s\")"),
            _ => invalid!("{what} is {n}; give whole bytes/s below 2^64, or a string such as \"300GB/s\""),
        },
        serde_json::Value::String(s) => crate::units::parse_bandwidth(s).map_err(|e| crate::error::Error::InvalidInput(format!("{what}: {e}"))),
        other => invalid!("{what} is {other}; expected bytes/s as a number or a string such as \"300GB/s\""),
    }
}

impl Graph {
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_compute(&self, v: u32) -> bool {
        self.nodes[v as usize].kind == NodeKind::Compute
    }
    /// Compute nodes in graph order: rank r of a plan is `compute_nodes()[r]`.
    pub fn compute_nodes(&self) -> Vec<u32> {
        (0..self.nodes.len() as u32).filter(|&v| self.is_compute(v)).collect()
    }
    pub fn num_compute(&self) -> usize {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Compute).count()
    }
    pub fn node_id(&self, name: &str) -> Option<u32> {
        self.nodes.iter().position(|n| n.name == name).map(|i| i as u32)
    }
    pub fn name(&self, v: u32) -> &str {
        &self.nodes[v as usize].name
    }
    pub fn ingress(&self, v: u32) -> u64 {
        self.links.iter().filter(|l| l.dst == v).map(|l| l.bw).sum()
    }
    pub fn egress(&self, v: u32) -> u64 {
        self.links.iter().filter(|l| l.src == v).map(|l| l.bw).sum()
    }
    pub fn capacity(&self, src: u32, dst: u32) -> u64 {
        self.links.iter().find(|l| l.src == src && l.dst == dst).map(|l| l.bw).unwrap_or(0)
    }

    /// Check every invariant; all constructors end here.
    pub fn validate(&self) -> Result<()> {
        let n = self.nodes.len();
        if self.num_compute() == 0 {
            return invalid!("graph '{}' has no compute node", self.name);
        }
        let mut seen = std::collections::BTreeSet::new();
        for nd in &self.nodes {
            if nd.name.is_empty() {
                return invalid!("graph node names must be non-empty");
            }
            if !seen.insert(nd.name.as_str()) {
                return invalid!("graph has two nodes named '{}'", nd.name);
            }
            if nd.multicast && nd.kind == NodeKind::Compute {
                return invalid!("node '{}': only switch nodes can be flagged multicast", nd.name);
            }
        }
        let mut pairs = std::collections::BTreeSet::new();
        let mut inb = vec![0u128; n];
        let mut outb = vec![0u128; n];
        for l in &self.links {
            if l.src as usize >= n || l.dst as usize >= n {
                return invalid!("link {} -> {} names a node that does not exist", l.src, l.dst);
            }
            if l.src == l.dst {
                return invalid!("self-loop on node '{}' is not allowed", self.name(l.src));
            }
            if l.bw == 0 {
                return invalid!("link {} -> {} has zero bandwidth", self.name(l.src), self.name(l.dst));
            }
            if !pairs.insert((l.src, l.dst)) {
                return invalid!("two links {} -> {}: merge parallel links into one", self.name(l.src), self.name(l.dst));
            }
            outb[l.src as usize] += l.bw as u128;
            inb[l.dst as usize] += l.bw as u128;
        }
        for v in 0..n {
            if inb[v] != outb[v] {
                return invalid!(
                    "graph is not Eulerian: node '{}' has ingress {} B/s but egress {} B/s (every node needs equal total ingress and egress bandwidth)",
                    self.nodes[v].name,
                    inb[v],
                    outb[v]
                );
            }
            if inb[v] > u64::MAX as u128 / 4 {
                return invalid!("node '{}' has more bandwidth than supported (2^62 B/s)", self.nodes[v].name);
            }
        }
        // Eulerian + weakly connected => strongly connected; check compute nodes share one component.
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        for l in &self.links {
            let (a, b) = (find(&mut parent, l.src as usize), find(&mut parent, l.dst as usize));
            if a != b {
                parent[a] = b;
            }
        }
        let comp = self.compute_nodes();
        let root = find(&mut parent, comp[0] as usize);
        for &c in &comp[1..] {
            if find(&mut parent, c as usize) != root {
                return invalid!(
                    "compute nodes '{}' and '{}' are not connected by any path",
                    self.name(comp[0]),
                    self.name(c)
                );
            }
        }
        Ok(())
    }

    pub fn from_json(text: &str) -> Result<Graph> {
        let j: GraphJson = match serde_json::from_str(text) {
            Ok(j) => j,
            Err(e) => return invalid!("graph JSON: {e}"),
        };
        let mut b = GraphBuilder::new(if j.name.is_empty() { "custom" } else { &j.name });
        for nd in &j.nodes {
            b.node(&nd.name, nd.kind, nd.box_id, nd.multicast)?;
        }
        for l in &j.links {
            let bw = link_bandwidth(&l.src, &l.dst, &l.bw)?;
            let (s, d) = (b.id(&l.src)?, b.id(&l.dst)?);
            b.link(s, d, bw)?;
        }
        b.finish()
    }

    pub fn to_json(&self) -> String {
        let j = GraphJson {
            name: self.name.clone(),
            nodes: self.nodes.clone(),
            links: self
                .links
                .iter()
                .map(|l| LinkJson { src: self.name(l.src).to_string(), dst: self.name(l.dst).to_string(), bw: BwJson(serde_json::Value::from(l.bw)) })
                .collect(),
        };
        serde_json::to_string_pretty(&j).expect("graph serialises")
    }

    /// GPUs per box when compute nodes are box-major with equal counts (plan ranks are
    /// compute nodes in graph order), else 0 (then tiers are not checked per server).
    pub fn gpus_per_box(&self) -> u32 {
        let comp = self.compute_nodes();
        let boxes: Vec<Option<u32>> = comp.iter().map(|&v| self.nodes[v as usize].box_id).collect();
        if boxes.iter().any(|b| b.is_none()) {
            return 0;
        }
        let first = boxes.iter().take_while(|&&b| b == boxes[0]).count();
        if first == 0 || !comp.len().is_multiple_of(first) {
            return 0;
        }
        for (r, b) in boxes.iter().enumerate() {
            if b.unwrap() != (r / first) as u32 {
                return 0;
            }
        }
        first as u32
    }

    /// `NAME:BOXES` for a paper testbed (a100, mi250, h100), else any `Cluster` spec lowered
    /// with `from_cluster` (e.g. `h200:4,nic=100Gbps`).
    pub fn parse_preset(spec: &str) -> Result<Graph> {
        let spec = spec.trim();
        let head = spec.split(',').next().unwrap_or("");
        if let Some((name, boxes)) = head.split_once(':') {
            let lname = name.trim().to_ascii_lowercase();
            if GRAPH_PRESETS.iter().any(|p| p.0 == lname) && !spec.contains(',') {
                let boxes: u32 = match boxes.trim().parse() {
                    Ok(v) if v > 0 && v <= 4096 => v,
                    _ => return invalid!("graph preset '{spec}': box count '{boxes}' must be an integer in 1..=4096"),
                };
                return match lname.as_str() {
                    "a100" => Graph::a100(boxes),
                    "mi250" => Graph::mi250(boxes),
                    _ => Graph::h100(boxes),
                };
            }
        }
        Graph::from_cluster(&Cluster::parse(spec)?)
    }

    /// DGX A100 boxes as in ForestColl's testbed. NICs exist only with more than one box.
    pub fn a100(boxes: u32) -> Result<Graph> {
        Graph::nvswitch_boxes(&format!("a100:{boxes}"), boxes, 300 * GBS, 25 * GBS, |nic| format!("ib{}", nic % 2))
    }

    /// DGX H100 boxes: NVSwitch 450 GB/s, 8 × 50 GB/s NICs on 8 rail switches.
    pub fn h100(boxes: u32) -> Result<Graph> {
        Graph::nvswitch_boxes(&format!("h100:{boxes}"), boxes, 450 * GBS, 50 * GBS, |nic| format!("rail{nic}"))
    }

    fn nvswitch_boxes(name: &str, boxes: u32, nvlink: u64, nic_bw: u64, net: impl Fn(u32) -> String) -> Result<Graph> {
        let mut b = GraphBuilder::new(name);
        let mut gpus = Vec::new();
        for a in 0..boxes {
            for i in 0..8 {
                gpus.push(b.node(&format!("b{a}.gpu{i}"), NodeKind::Compute, Some(a), false)?);
            }
        }
        let mut nets: BTreeMap<String, u32> = BTreeMap::new();
        for a in 0..boxes {
            let sw = b.node(&format!("b{a}.nvswitch"), NodeKind::Switch, Some(a), false)?;
            for i in 0..8 {
                b.duplex(gpus[(a * 8 + i) as usize], sw, nvlink)?;
            }
            if boxes > 1 {
                for i in 0..8u32 {
                    let nic = b.node(&format!("b{a}.nic{i}"), NodeKind::Switch, Some(a), false)?;
                    b.duplex(gpus[(a * 8 + i) as usize], nic, nic_bw)?;
                    let net_name = net(i);
                    let id = match nets.get(&net_name) {
                        Some(&id) => id,
                        None => {
                            let id = b.node(&net_name, NodeKind::Switch, None, false)?;
                            nets.insert(net_name, id);
                            id
                        }
                    };
                    b.duplex(nic, id, nic_bw)?;
                }
            }
        }
        b.finish()
    }

    /// MI250 boxes as in ForestColl's testbed: the IB switch exists only with more than one box.
    pub fn mi250(boxes: u32) -> Result<Graph> {
        let mut b = GraphBuilder::new(&format!("mi250:{boxes}"));
        let mut gcds = Vec::new();
        for a in 0..boxes {
            for i in 0..16 {
                gcds.push(b.node(&format!("b{a}.gcd{i}"), NodeKind::Compute, Some(a), false)?);
            }
        }
        for a in 0..boxes {
            let base = (a * 16) as usize;
            for &(x, y, links) in MI250_LINKS {
                b.duplex(gcds[base + x as usize], gcds[base + y as usize], links * 50 * GBS)?;
            }
        }
        if boxes > 1 {
            let ib = b.node("ib", NodeKind::Switch, None, false)?;
            for &g in &gcds {
                b.duplex(g, ib, 16 * GBS)?;
            }
        }
        b.finish()
    }

    /// Lower a two-tier cluster: per server one switch node for a switch fabric (GPU <-> switch
    /// at port_bw) or direct GPU links for mesh/ring/cube-mesh fabrics; with more than one
    /// server, each NIC is a switch node linked to its GPU and to one non-blocking core
    /// switch `net` at nic_bw (the same fabric the cluster simulator assumes); a NIC shared by
    /// several GPUs becomes one such node per GPU with an equal share of its bandwidth.
    pub fn from_cluster(c: &Cluster) -> Result<Graph> {
        c.validate()?;
        let mut b = GraphBuilder::new(&c.name);
        let g = c.gpus_per_server;
        for r in 0..c.num_gpus() {
            b.node(&format!("s{}.gpu{}", c.server_of(r), c.local_index(r)), NodeKind::Compute, Some(c.server_of(r)), false)?;
        }
        let net = if c.servers > 1 { Some(b.node("net", NodeKind::Switch, None, false)?) } else { None };
        for s in 0..c.servers {
            match c.scaleup {
                ScaleUp::Switch { port_bw } => {
                    let sw = b.node(&format!("s{s}.switch"), NodeKind::Switch, Some(s), false)?;
                    for l in 0..g {
                        b.duplex(c.rank(s, l), sw, port_bw)?;
                    }
                }
                ScaleUp::FullMesh { link_bw } | ScaleUp::Ring { link_bw } | ScaleUp::HybridCubeMesh { link_bw } => {
                    for x in 0..g {
                        for y in 0..g {
                            if c.scaleup_adjacent(x, y) {
                                b.link(c.rank(s, x), c.rank(s, y), link_bw)?;
                            }
                        }
                    }
                }
            }
            if let Some(net) = net {
                for n in 0..c.nics_per_server {
                    // A NIC shared by several GPUs: one NIC node joining them would let the
                    // trees loop GPU -> NIC -> GPU inside the server, a path the cluster (and
                    // its simulator) does not have: there a same-server transfer crosses the
                    // scale-up fabric. So each GPU gets its own equal share of the NIC
                    // (rounded down), a static split that an allgather's symmetric load fills.
                    let users: Vec<u32> = (0..g).filter(|l| l % c.nics_per_server == n).collect();
                    let share = (c.nic_bw / users.len().max(1) as u64).max(1);
                    for &l in &users {
                        let name = if users.len() == 1 { format!("s{s}.nic{n}") } else { format!("s{s}.nic{n}.gpu{l}") };
                        let nic = b.node(&name, NodeKind::Switch, Some(s), false)?;
                        b.duplex(c.rank(s, l), nic, share)?;
                        b.duplex(nic, net, share)?;
                    }
                }
            }
        }
        b.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn link_bandwidth_errors_name_the_link_and_field() {
        let doc = |bw: &str| {
            format!(
                r#"{{"nodes":[{{"name":"a","kind":"compute"}},{{"name":"b","kind":"compute"}}],
                   "links":[{{"src":"a","dst":"b","bw":{bw}}},{{"src":"b","dst":"a","bw":5}}]}}"#
            )
        };
        for (bw, want) in [("-5", "is -5; bandwidths must be positive"), ("1.5", "whole bytes/s"), ("[1]", "expected bytes/s"), ("\"fast\"", "does not start with a number")] {
            let e = Graph::from_json(&doc(bw)).unwrap_err().to_string();
            assert!(e.contains("link a -> b: field 'bw'") && e.contains(want) && !e.contains("variant"), "{bw}: {e}");
        }
        let g = Graph::from_json(&doc("5")).unwrap();
        assert_eq!(Graph::from_json(&g.to_json()).unwrap().to_json(), g.to_json());
        assert_eq!(g.capacity(0, 1), 5);
        assert_eq!(Graph::from_json(&doc("\"40Gbps\"")).unwrap_err().to_string().contains("Eulerian"), true);
    }
    #[test]
    fn presets_are_eulerian_and_sized() {
        let a = Graph::parse_preset("a100:2").unwrap();
        assert_eq!(a.num_compute(), 16);
        assert_eq!(a.num_nodes(), 16 + 2 + 16 + 2);
        assert_eq!(a.gpus_per_box(), 8);
        let m = Graph::parse_preset("mi250:2").unwrap();
        assert_eq!(m.num_compute(), 32);
        for v in m.compute_nodes() {
            assert_eq!(m.egress(v), 350 * GBS + 16 * GBS);
        }
        let h = Graph::parse_preset("h100:3").unwrap();
        assert_eq!(h.num_nodes(), 24 + 3 + 24 + 8);
        let one = Graph::parse_preset("a100:1").unwrap();
        assert_eq!(one.num_nodes(), 9);
    }
    #[test]
    fn cluster_lowering() {
        let g = Graph::parse_preset("mi300x:2").unwrap();
        assert_eq!(g.num_compute(), 16);
        assert_eq!(g.capacity(0, 1), 64 * GBS);
        let v = Graph::parse_preset("v100:2").unwrap();
        assert_eq!(v.gpus_per_box(), 8);
        assert!(Graph::parse_preset("nope:2").is_err());
    }
    #[test]
    fn shared_nics_lower_to_one_share_per_gpu() {
        // mi250 cluster: 8 GCDs, NIC n shared by GCDs n and n + 4. A single NIC node would
        // let a tree run GCD n -> NIC -> GCD n+4 inside the server, which the cluster's
        // fabric (a same-server transfer crosses the ring) does not have.
        let c = Cluster::parse("mi250:2").unwrap();
        let g = Graph::from_cluster(&c).unwrap();
        let nic = g.node_id("s0.nic1.gpu5").expect("one NIC node per GPU");
        assert_eq!(g.capacity(5, nic), c.nic_bw / 2);
        assert_eq!(g.capacity(nic, 5), c.nic_bw / 2);
        assert_eq!(g.capacity(1, nic), 0, "GCD 1 has its own share of NIC 1");
        for v in 0..g.num_nodes() as u32 {
            if g.name(v).contains(".nic") {
                let gpus = (0..g.num_nodes() as u32).filter(|&u| g.is_compute(u) && g.capacity(u, v) > 0).count();
                assert_eq!(gpus, 1, "{} joins {gpus} GPUs", g.name(v));
            }
        }
        // One GPU per NIC: unchanged, one node per NIC at full bandwidth.
        let h = Graph::from_cluster(&Cluster::parse("h100:2").unwrap()).unwrap();
        assert_eq!(h.capacity(3, h.node_id("s0.nic3").unwrap()), 50 * GBS);
    }
    #[test]
    fn json_round_trip_and_errors() {
        let g = Graph::parse_preset("a100:2").unwrap();
        let back = Graph::from_json(&g.to_json()).unwrap();
        assert_eq!(back, g);
        let bad = r#"{"nodes":[{"name":"a","kind":"compute"},{"name":"b","kind":"compute"}],"links":[{"src":"a","dst":"b","bw":5},{"src":"b","dst":"a","bw":4}]}"#;
        let e = Graph::from_json(bad).unwrap_err().to_string();
        assert!(e.contains("not Eulerian") && e.contains("'a'"), "{e}");
        let unit = r#"{"nodes":[{"name":"a","kind":"compute"},{"name":"b","kind":"compute"}],"links":[{"src":"a","dst":"b","bw":"8Gbps"},{"src":"b","dst":"a","bw":1000000000}]}"#;
        assert_eq!(Graph::from_json(unit).unwrap().capacity(0, 1), GBS);
        let sw_only = r#"{"nodes":[{"name":"s","kind":"switch"}],"links":[]}"#;
        assert!(Graph::from_json(sw_only).unwrap_err().to_string().contains("no compute node"));
        let split = r#"{"nodes":[{"name":"a","kind":"compute"},{"name":"b","kind":"compute"}],"links":[]}"#;
        assert!(Graph::from_json(split).unwrap_err().to_string().contains("not connected"));
    }
}
