//! Max-flow on integer capacities: Dinic's algorithm on a compact CSR residual graph,
//! with an optional flow limit (stop as soon as `limit` units arrive, which is all a
//! feasibility test needs) and min-cut extraction. `edmonds_karp` is the simple
//! reference implementation the tests and `crates/collsched-bench/benches/maxflow.rs` compare against.
//!
//! Capacities are u64; `INF` stands for "uncuttable" edges and must dominate any finite
//! cut (callers keep finite capacities far below it).
pub type Cap = u64;
pub const INF: Cap = u64::MAX / 4;

/// A flow network built once and solved many times (`reset` restores the capacities,
/// `set_capacity` changes one edge before the next solve).
#[derive(Clone, Debug, Default)]
pub struct FlowNetwork {
    n: usize,
    /// Edge `2i` is the i-th added edge, `2i+1` its reverse; `to[e]` is the head.
    to: Vec<u32>,
    cap: Vec<Cap>,
    orig: Vec<Cap>,
    start: Vec<u32>,
    adj: Vec<u32>,
    built: bool,
    level: Vec<u32>,
    iter: Vec<u32>,
    queue: Vec<u32>,
    path: Vec<u32>,
}

const UNSEEN: u32 = u32::MAX;

impl FlowNetwork {
    pub fn new(n: usize) -> FlowNetwork {
        FlowNetwork { n, ..Default::default() }
    }
    pub fn num_nodes(&self) -> usize {
        self.n
    }
    /// Add a node and return its id (invalidates the compiled adjacency).
    pub fn add_node(&mut self) -> u32 {
        self.n += 1;
        self.built = false;
        (self.n - 1) as u32
    }
    /// Add edge u -> v of capacity c; returns its id for `set_capacity` / `flow_on`.
    pub fn add_edge(&mut self, u: u32, v: u32, c: Cap) -> usize {
        debug_assert!((u as usize) < self.n && (v as usize) < self.n);
        let id = self.to.len();
        self.to.push(v);
        self.cap.push(c);
        self.orig.push(c);
        self.to.push(u);
        self.cap.push(0);
        self.orig.push(0);
        self.built = false;
        id
    }
    pub fn set_capacity(&mut self, edge: usize, c: Cap) {
        self.orig[edge] = c;
        self.cap[edge] = c;
        self.cap[edge ^ 1] = 0;
    }
    /// Remove all flow.
    pub fn reset(&mut self) {
        self.cap.copy_from_slice(&self.orig);
    }
    /// The residual capacities, to `restore` a solved state and augment from it again.
    pub fn snapshot(&self) -> Vec<Cap> {
        self.cap.clone()
    }
    pub fn restore(&mut self, snap: &[Cap]) {
        self.cap.copy_from_slice(snap);
    }
    /// Change the residual capacity of an edge that carries no flow (keeps `orig` as is).
    pub fn set_residual(&mut self, edge: usize, c: Cap) {
        debug_assert_eq!(self.cap[edge ^ 1], 0);
        self.cap[edge] = c;
    }
    /// Flow currently on an added edge.
    pub fn flow_on(&self, edge: usize) -> Cap {
        self.orig[edge] - self.cap[edge]
    }
    fn build(&mut self) {
        if self.built {
            return;
        }
        let mut deg = vec![0u32; self.n + 1];
        for e in 0..self.to.len() {
            deg[self.to[e ^ 1] as usize] += 1;
        }
        let mut start = vec![0u32; self.n + 1];
        for v in 0..self.n {
            start[v + 1] = start[v] + deg[v];
        }
        let mut fill = start.clone();
        let mut adj = vec![0u32; self.to.len()];
        for e in 0..self.to.len() {
            let from = self.to[e ^ 1] as usize;
            adj[fill[from] as usize] = e as u32;
            fill[from] += 1;
        }
        self.start = start;
        self.adj = adj;
        self.level = vec![UNSEEN; self.n];
        self.iter = vec![0; self.n];
        self.built = true;
    }

    fn bfs(&mut self, s: u32, t: u32) -> bool {
        self.level.iter_mut().for_each(|l| *l = UNSEEN);
        self.queue.clear();
        self.level[s as usize] = 0;
        self.queue.push(s);
        let mut head = 0;
        while head < self.queue.len() {
            let u = self.queue[head] as usize;
            head += 1;
            if u == t as usize {
                break; // deeper nodes cannot lie on a shortest path to t
            }
            for i in self.start[u]..self.start[u + 1] {
                let e = self.adj[i as usize] as usize;
                let v = self.to[e] as usize;
                if self.cap[e] > 0 && self.level[v] == UNSEEN {
                    self.level[v] = self.level[u] + 1;
                    self.queue.push(v as u32);
                }
            }
        }
        self.level[t as usize] != UNSEEN
    }

    /// Push up to `limit` more units from s to t on top of the current flow; returns the
    /// amount pushed. With `limit = INF` this is a max-flow.
    pub fn max_flow(&mut self, s: u32, t: u32, limit: Cap) -> Cap {
        self.build();
        if s == t {
            return 0;
        }
        let mut total: Cap = 0;
        while total < limit && self.bfs(s, t) {
            for v in 0..self.n {
                self.iter[v] = self.start[v];
            }
            let tl = self.level[t as usize];
            // Iterative blocking-flow DFS along level-increasing edges.
            self.path.clear();
            let mut u = s as usize;
            loop {
                if u == t as usize {
                    let mut push = limit - total;
                    for &e in &self.path {
                        push = push.min(self.cap[e as usize]);
                    }
                    let mut cut_at = usize::MAX;
                    for (i, &e) in self.path.iter().enumerate() {
                        let e = e as usize;
                        self.cap[e] -= push;
                        self.cap[e ^ 1] += push;
                        if self.cap[e] == 0 && cut_at == usize::MAX {
                            cut_at = i;
                        }
                    }
                    total += push;
                    if total >= limit {
                        return total;
                    }
                    // Resume from the tail of the first saturated edge.
                    let e = self.path[cut_at] as usize;
                    u = self.to[e ^ 1] as usize;
                    self.path.truncate(cut_at);
                    continue;
                }
                let mut advanced = false;
                if self.level[u] < tl {
                    while self.iter[u] < self.start[u + 1] {
                        let e = self.adj[self.iter[u] as usize] as usize;
                        let v = self.to[e] as usize;
                        if self.cap[e] > 0 && self.level[v] == self.level[u] + 1 {
                            self.path.push(e as u32);
                            u = v;
                            advanced = true;
                            break;
                        }
                        self.iter[u] += 1;
                    }
                }
                if !advanced {
                    // Dead end: no augmenting path through u in this phase.
                    self.level[u] = UNSEEN;
                    match self.path.pop() {
                        None => break,
                        Some(e) => {
                            u = self.to[(e ^ 1) as usize] as usize;
                            self.iter[u] += 1;
                        }
                    }
                }
            }
        }
        total
    }

    /// After a max-flow: nodes reachable from `s` in the residual graph (the source side
    /// of the min cut with the smallest source side).
    pub fn source_side(&mut self, s: u32) -> Vec<bool> {
        self.build();
        let mut seen = vec![false; self.n];
        let mut stack = vec![s];
        seen[s as usize] = true;
        while let Some(u) = stack.pop() {
            let u = u as usize;
            for i in self.start[u]..self.start[u + 1] {
                let e = self.adj[i as usize] as usize;
                let v = self.to[e] as usize;
                if self.cap[e] > 0 && !seen[v] {
                    seen[v] = true;
                    stack.push(v as u32);
                }
            }
        }
        seen
    }
}

/// Reference max-flow: Edmonds–Karp (BFS augmenting paths) on an edge list.
/// O(V E^2); for tests and the benchmark baseline only.
pub fn edmonds_karp(n: usize, edges: &[(u32, u32, Cap)], s: u32, t: u32) -> Cap {
    let mut to = Vec::with_capacity(edges.len() * 2);
    let mut cap = Vec::with_capacity(edges.len() * 2);
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(u, v, c) in edges {
        adj[u as usize].push(to.len());
        to.push(v);
        cap.push(c);
        adj[v as usize].push(to.len());
        to.push(u);
        cap.push(0);
    }
    let mut total: Cap = 0;
    if s == t {
        return 0;
    }
    loop {
        let mut prev = vec![usize::MAX; n];
        let mut seen = vec![false; n];
        seen[s as usize] = true;
        let mut q = std::collections::VecDeque::from([s as usize]);
        while let Some(u) = q.pop_front() {
            for &e in &adj[u] {
                let v = to[e] as usize;
                if cap[e] > 0 && !seen[v] {
                    seen[v] = true;
                    prev[v] = e;
                    q.push_back(v);
                }
            }
        }
        if !seen[t as usize] {
            return total;
        }
        let mut push = Cap::MAX;
        let mut v = t as usize;
        while v != s as usize {
            let e = prev[v];
            push = push.min(cap[e]);
            v = to[e ^ 1] as usize;
        }
        let mut v = t as usize;
        while v != s as usize {
            let e = prev[v];
            cap[e] -= push;
            cap[e ^ 1] += push;
            v = to[e ^ 1] as usize;
        }
        total += push;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    }
    #[test]
    fn dinic_matches_edmonds_karp_on_random_graphs() {
        let mut seed = 7u64;
        for _ in 0..300 {
            let n = 2 + (lcg(&mut seed) % 12) as usize;
            let m = lcg(&mut seed) % 40;
            let edges: Vec<(u32, u32, Cap)> = (0..m)
                .map(|_| ((lcg(&mut seed) % n as u64) as u32, (lcg(&mut seed) % n as u64) as u32, lcg(&mut seed) % 20))
                .filter(|e| e.0 != e.1)
                .collect();
            let mut net = FlowNetwork::new(n);
            for &(u, v, c) in &edges {
                net.add_edge(u, v, c);
            }
            let f = net.max_flow(0, (n - 1) as u32, INF);
            assert_eq!(f, edmonds_karp(n, &edges, 0, (n - 1) as u32));
            // Min cut: capacity out of the residual-reachable set equals the flow.
            let side = net.source_side(0);
            let cut: Cap = edges.iter().filter(|e| side[e.0 as usize] && !side[e.1 as usize]).map(|e| e.2).sum();
            assert_eq!(cut, f);
            // A limit stops early; reset restores.
            net.reset();
            assert_eq!(net.max_flow(0, (n - 1) as u32, f / 2), f / 2);
            assert_eq!(net.max_flow(0, (n - 1) as u32, INF), f - f / 2);
        }
    }
}
