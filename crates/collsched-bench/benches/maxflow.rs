//! Max-flow benchmark: our Dinic (`flow::FlowNetwork`) against two Edmonds–Karp
//! references, the `pathfinding` crate's sparse implementation (a maintained crates.io
//! max-flow; petgraph has none) and our own `flow::edmonds_karp`, on the flow networks
//! ForestColl actually solves: the optimality auxiliary network of a100:N and mi250:N
//! (source s -> every GPU, sink one GPU). All three must agree on the value.
//! Run: `cargo bench -p collsched-core --bench maxflow`.
use collsched_core::flow::{edmonds_karp, FlowNetwork, INF};
use collsched_core::forest::optimal;
use collsched_core::topology::graph::Graph;
use criterion::{black_box, Criterion};
use std::time::Instant;

/// The Theorem-1 auxiliary network at the optimum: edges scaled so every test is tight.
fn aux_network(spec: &str) -> (usize, Vec<(u32, u32, u64)>, u32, u32) {
    let g = Graph::parse_preset(spec).unwrap();
    let o = optimal(&g).unwrap();
    // 1/x* = p/q in normalised units: links scaled by p, s -> c of capacity q (= x* · p).
    let (p, q) = ((o.inv_x.num * o.unit as u128) as u64, o.inv_x.den as u64);
    let s = g.num_nodes() as u32;
    let mut edges: Vec<(u32, u32, u64)> = g.links.iter().map(|l| (l.src, l.dst, l.bw / o.unit * p)).collect();
    for c in g.compute_nodes() {
        edges.push((s, c, q));
    }
    let sink = *g.compute_nodes().last().unwrap();
    (g.num_nodes() + 1, edges, s, sink)
}

/// A random sparse network with wide capacities (a harder case than the testbeds).
fn random_network(n: usize, m: usize, seed: u64) -> (usize, Vec<(u32, u32, u64)>, u32, u32) {
    let mut x = seed;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    };
    let edges = (0..m)
        .map(|_| ((next() % n as u64) as u32, (next() % n as u64) as u32, 1 + next() % 1000))
        .filter(|e| e.0 != e.1)
        .collect();
    (n, edges, 0, (n - 1) as u32)
}

fn dinic(n: usize, edges: &[(u32, u32, u64)], s: u32, t: u32) -> u64 {
    let mut net = FlowNetwork::new(n);
    for &(a, b, c) in edges {
        net.add_edge(a, b, c);
    }
    net.max_flow(s, t, INF)
}

fn pathfinding_ek(n: usize, edges: &[(u32, u32, u64)], s: u32, t: u32) -> u64 {
    use pathfinding::directed::edmonds_karp::{edmonds_karp, SparseCapacity};
    let vertices: Vec<u32> = (0..n as u32).collect();
    let caps = edges.iter().map(|&(a, b, c)| ((a, b), c as i64));
    let (_, total, _) = edmonds_karp::<u32, i64, _, SparseCapacity<i64>>(&vertices, &s, &t, caps);
    total as u64
}

fn time_one(f: &dyn Fn() -> u64, reps: u32) -> (u64, f64) {
    let mut v = 0;
    let t = Instant::now();
    for _ in 0..reps {
        v = black_box(f());
    }
    (v, t.elapsed().as_secs_f64() / reps as f64)
}

type Case = (usize, Vec<(u32, u32, u64)>, u32, u32);

fn main() {
    println!("{:<10} {:>6} {:>7} {:>14} {:>14} {:>14} {:>9} {:>9}", "graph", "nodes", "edges", "dinic_us", "pathfind_EK_us", "own_EK_us", "vs_pf", "vs_ownEK");
    let cases: Vec<(String, Case)> = ["a100:2", "mi250:2", "a100:8", "mi250:8", "a100:32", "a100:128"]
        .iter()
        .map(|s| (s.to_string(), aux_network(s)))
        .chain([("rand300".to_string(), random_network(300, 3000, 1)), ("rand2000".to_string(), random_network(2000, 20000, 2))])
        .collect();
    for (spec, (n, edges, s, t)) in cases {
        let reps = if n > 1000 { 3 } else { 20 };
        let (n, edges, s, t) = (n, &edges, s, t);
        let (fd, td) = time_one(&|| dinic(n, edges, s, t), reps);
        let (fp, tp) = time_one(&|| pathfinding_ek(n, edges, s, t), if n > 1000 { 1 } else { 3 });
        let (fe, te) = time_one(&|| edmonds_karp(n, edges, s, t), if n > 1000 { 1 } else { 3 });
        assert_eq!(fd, fp, "{spec}: dinic and pathfinding disagree");
        assert_eq!(fd, fe, "{spec}: dinic and own Edmonds–Karp disagree");
        println!(
            "{:<10} {:>6} {:>7} {:>14.1} {:>14.1} {:>14.1} {:>8.1}x {:>8.1}x",
            spec,
            n,
            edges.len(),
            td * 1e6,
            tp * 1e6,
            te * 1e6,
            tp / td,
            te / td
        );
    }
    // Criterion timing of the hot case (a100:8 auxiliary network) for regression tracking.
    let (n, edges, s, t) = aux_network("a100:8");
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    c.bench_function("dinic_a100_8_aux", |b| b.iter(|| dinic(n, &edges, s, t)));
    c.final_summary();
}
