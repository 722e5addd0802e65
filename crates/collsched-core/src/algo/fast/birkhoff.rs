//! Birkhoff–von Neumann decomposition with bottleneck matchings (FAST §4.2).
//!
//! A scaled doubly stochastic integer matrix is peeled into permutation
//! matrices × integer weights. Each permutation is a bottleneck perfect
//! matching on the support of what remains: the matching whose smallest entry
//! is as large as possible, so each stage moves as much as it can and the
//! heavy entries go first. Found with Hopcroft–Karp on the entries above a
//! threshold that only descends (see `Bottleneck`), warm-started from the
//! previous stage's matching.
//! Ties are broken by index, so the result is deterministic.

const NONE: u32 = u32::MAX;

/// One stage: server s sends to `perm[s]` (perm[s] == s means idle) `weight` bytes or units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub perm: Vec<u32>,
    pub weight: u64,
}

/// Hopcroft–Karp on the bipartite graph {(r, c) : m[r][c] ≥ θ > 0}, with state kept
/// between calls so a new threshold starts from the last matching. The graph is kept as
/// one bit per entry (`adj`), a row built for a threshold when a search first reaches it:
/// the searches then visit edges in column order by walking set bits instead of comparing
/// every entry of a row, and rows no search reaches are not built (rebuilding all N² bits
/// at every new threshold took 4–8% longer at 128 servers).
pub struct Matcher {
    n: usize,
    /// 64-bit words per row of `adj`.
    words: usize,
    pub mate_row: Vec<u32>,
    mate_col: Vec<u32>,
    dist: Vec<u32>,
    queue: Vec<u32>,
    next: Vec<u32>,
    /// Bit c%64 of word r·words + c/64 is set when m[r][c] ≥ `row_theta[r]` (bits past n
    /// stay clear).
    adj: Vec<u64>,
    /// The θ of the current search (0: none yet).
    adj_theta: u64,
    /// The θ each row of `adj` was built for (0: not built). Entries only decrease between
    /// calls (`lower`), so at an unchanged θ a row is patched instead of rebuilt.
    row_theta: Vec<u64>,
    /// Columns the BFS has reached, one bit each.
    col_reached: Vec<u64>,
    /// Per BFS layer k, the columns whose mate has distance k (layer k at
    /// `layer_cols[k·words..]`), and the free columns: the only columns a DFS step from a
    /// row of layer k − 1 can take, so it skips the rest of the row's edges in whole words.
    /// Kept exact through augmentations; a row found dead keeps its column's bit (its
    /// distance check still fails).
    layer_cols: Vec<u64>,
    free_cols: Vec<u64>,
    /// Layers of `layer_cols` that may hold bits.
    layers_dirty: usize,
}

impl Matcher {
    pub fn new(n: usize) -> Matcher {
        let words = n.div_ceil(64);
        Matcher { n, words, mate_row: vec![NONE; n], mate_col: vec![NONE; n], dist: vec![0; n], queue: Vec::with_capacity(n), next: vec![0; n], adj: vec![0; n * words], adj_theta: 0, row_theta: vec![0; n], col_reached: vec![0; words], layer_cols: vec![0; (n + 2) * words], free_cols: vec![0; words], layers_dirty: 0 }
    }

    /// Build row `r` of `adj` for `m` at the current θ, unless it is built for it.
    #[inline]
    fn ensure_row(&mut self, m: &[u64], r: usize) {
        let theta = self.adj_theta;
        if self.row_theta[r] == theta {
            return;
        }
        let (n, words) = (self.n, self.words);
        for (w, chunk) in m[r * n..(r + 1) * n].chunks(64).enumerate() {
            let mut bits = 0u64;
            for (i, &v) in chunk.iter().enumerate() {
                bits |= u64::from(v >= theta) << i;
            }
            self.adj[r * words + w] = bits;
        }
        self.row_theta[r] = theta;
    }

    /// Entry (r, c) of the matrix was lowered to `value`: drop its edge if it fell below
    /// the θ its row was built for.
    #[inline]
    fn lower(&mut self, r: usize, c: usize, value: u64) {
        if value < self.row_theta[r] {
            self.adj[r * self.words + c / 64] &= !(1u64 << (c % 64));
        }
    }

    /// First column ≥ `from` with an edge from row `r` that a DFS step from layer `d`
    /// can take: free, or matched to a row of layer d + 1 (`layer_cols`). Every column it
    /// skips would fail the DFS's check, so the DFS visits what a scan of all edges would.
    #[inline]
    fn next_edge(&self, r: usize, from: usize, d: usize) -> Option<usize> {
        let words = self.words;
        debug_assert_eq!(self.row_theta[r], self.adj_theta, "a DFS row was reached by the BFS");
        let row = &self.adj[r * words..(r + 1) * words];
        let layer = &self.layer_cols[(d + 1) * words..(d + 2) * words];
        let mut w = from / 64;
        if w >= words {
            return None;
        }
        let mut bits = row[w] & (layer[w] | self.free_cols[w]) & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            if w == words {
                return None;
            }
            bits = row[w] & (layer[w] | self.free_cols[w]);
        }
    }

    /// After a BFS: each column's layer (its mate's distance) or free, for `next_edge`.
    fn sort_columns_by_layer(&mut self) {
        let words = self.words;
        // BFS order: the last row queued has the largest distance.
        let deepest = self.queue.last().map_or(0, |&r| self.dist[r as usize] as usize);
        let layers = (deepest + 1).max(self.layers_dirty);
        self.layer_cols[..layers * words].iter_mut().for_each(|x| *x = 0);
        self.free_cols.iter_mut().for_each(|x| *x = 0);
        for c in 0..self.n {
            let bit = 1u64 << (c % 64);
            match self.mate_col[c] {
                NONE => self.free_cols[c / 64] |= bit,
                r2 => {
                    let k = self.dist[r2 as usize];
                    if k != NONE {
                        self.layer_cols[k as usize * words + c / 64] |= bit;
                    }
                }
            }
        }
        self.layers_dirty = deepest + 1;
    }

    /// Drop matched edges that fall below `theta`.
    fn prune(&mut self, m: &[u64], theta: u64) {
        let n = self.n;
        for r in 0..n {
            let c = self.mate_row[r];
            if c != NONE && m[r * n + c as usize] < theta.max(1) {
                self.mate_row[r] = NONE;
                self.mate_col[c as usize] = NONE;
            }
        }
    }

    /// Layer the rows by alternating paths from the free rows (over `adj`); true if a
    /// free column is reachable.
    fn bfs(&mut self, m: &[u64]) -> bool {
        let (n, words) = (self.n, self.words);
        self.queue.clear();
        for r in 0..n {
            if self.mate_row[r] == NONE {
                self.dist[r] = 0;
                self.queue.push(r as u32);
            } else {
                self.dist[r] = NONE;
            }
        }
        // A matched row is reached only through its mate column, so "row not yet layered"
        // is "column not yet reached": each column is looked at once, the first time an
        // edge reaches it (same layers and queue order as checking every edge).
        self.col_reached.iter_mut().for_each(|x| *x = 0);
        let mut found = false;
        let mut head = 0;
        while head < self.queue.len() {
            let r = self.queue[head] as usize;
            head += 1;
            self.ensure_row(m, r);
            for w in 0..words {
                let mut bits = self.adj[r * words + w] & !self.col_reached[w];
                self.col_reached[w] |= bits;
                while bits != 0 {
                    let c = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let r2 = self.mate_col[c];
                    if r2 == NONE {
                        found = true;
                    } else {
                        self.dist[r2 as usize] = self.dist[r] + 1;
                        self.queue.push(r2);
                    }
                }
            }
        }
        found
    }

    fn dfs(&mut self, r: usize) -> bool {
        let n = self.n;
        let d = self.dist[r] as usize;
        while (self.next[r] as usize) < n {
            let Some(c) = self.next_edge(r, self.next[r] as usize, d) else {
                self.next[r] = n as u32;
                break;
            };
            self.next[r] = c as u32 + 1;
            let r2 = self.mate_col[c];
            if r2 == NONE || (self.dist[r2 as usize] == self.dist[r] + 1 && self.dfs(r2 as usize)) {
                self.move_column(c, r2, d);
                self.mate_row[r] = c as u32;
                self.mate_col[c] = r as u32;
                return true;
            }
        }
        self.dist[r] = NONE;
        false
    }

    /// Column c, matched to `old` (free or of layer d + 1), is now matched to a row of
    /// layer d.
    #[inline]
    fn move_column(&mut self, c: usize, old: u32, d: usize) {
        let (w, bit, words) = (c / 64, 1u64 << (c % 64), self.words);
        if old == NONE {
            self.free_cols[w] &= !bit;
        } else {
            self.layer_cols[(d + 1) * words + w] &= !bit;
        }
        self.layer_cols[d * words + w] |= bit;
    }

    /// Grow the current matching to a maximum one on edges ≥ θ; true if perfect.
    pub fn perfect(&mut self, m: &[u64], theta: u64) -> bool {
        let theta = theta.max(1);
        self.prune(m, theta);
        let n = self.n;
        let mut size = self.mate_row.iter().filter(|&&c| c != NONE).count();
        if size == n {
            return true;
        }
        self.adj_theta = theta;
        while size < n && self.bfs(m) {
            self.sort_columns_by_layer();
            self.next.iter_mut().for_each(|x| *x = 0);
            let before = size;
            for r in 0..n {
                if self.mate_row[r] == NONE && self.dfs(r) {
                    size += 1;
                }
            }
            // A phase whose BFS reached a free column always augments; should one not,
            // stop (the matching is reported not perfect) rather than loop forever.
            if size == before {
                debug_assert!(false, "a Hopcroft–Karp phase found no augmenting path");
                break;
            }
        }
        size == n
    }
}

impl Matcher {
    /// After `perfect` failed at `theta`: the largest entry below `theta` on an edge from a
    /// row reachable from a free row (alternating paths over edges ≥ θ) to an unreachable
    /// column. Only such an edge can create an augmenting path, so every threshold between
    /// it and `theta` is infeasible too. 0 if there is none.
    fn next_threshold(&self, m: &[u64], theta: u64) -> u64 {
        // `perfect` failed on this m and θ, and its last BFS (no augmenting path) left
        // the reached rows in `dist` and the columns their edges reach in `col_reached`.
        let n = self.n;
        let mut best = 0;
        for r in 0..n {
            if self.dist[r] != NONE {
                for (c, &v) in m[r * n..(r + 1) * n].iter().enumerate() {
                    if v < theta && v > best && self.col_reached[c / 64] >> (c % 64) & 1 == 0 {
                        best = v;
                    }
                }
            }
        }
        best
    }
}

/// Successive bottleneck matchings of a shrinking matrix. The bottleneck value never
/// increases as stages are subtracted (entries only shrink), so the threshold only moves
/// down: each stage starts at the last bottleneck and descends through the only
/// thresholds that can complete the matching, warm-started from the last matching.
pub struct Bottleneck {
    matcher: Matcher,
    theta: u64,
    /// Row and column maxima of the matrix `next` last saw, kept up to date by
    /// `subtract` (which changes one entry per line): recomputing them from scratch
    /// was an O(N²) pass per stage. Valid only while `maxima_valid`.
    row_max: Vec<u64>,
    col_max: Vec<u64>,
    maxima_valid: bool,
}

impl Bottleneck {
    pub fn new(n: usize) -> Bottleneck {
        Bottleneck { matcher: Matcher::new(n), theta: u64::MAX, row_max: vec![0; n], col_max: vec![0; n], maxima_valid: false }
    }

    /// Row and column maxima of `m` in one row-major pass (a column walk misses the cache at large N).
    fn compute_maxima(&mut self, m: &[u64], n: usize) {
        self.col_max.iter_mut().for_each(|x| *x = 0);
        for (row, rm) in m[..n * n].chunks_exact(n.max(1)).zip(self.row_max.iter_mut()) {
            let mut row_max = 0;
            for (cm, &v) in self.col_max.iter_mut().zip(row) {
                row_max = row_max.max(v);
                *cm = (*cm).max(v);
            }
            *rm = row_max;
        }
        self.maxima_valid = true;
    }

    /// Subtract `b` from `m` on the permutation `perm` (a stage `next` returned for this
    /// `m`), updating the line maxima: a line's maximum can only change when its one
    /// lowered entry was that maximum, and only that line is rescanned.
    pub fn subtract(&mut self, m: &mut [u64], n: usize, perm: &[u32], b: u64) {
        // A permutation lowers exactly one entry of each row and of each column, so a
        // line can be rescanned as soon as its entry is lowered.
        let valid = self.maxima_valid && b > 0;
        for (r, &c) in perm.iter().enumerate() {
            let c = c as usize;
            let old = m[r * n + c];
            m[r * n + c] = old - b;
            if valid {
                if old == self.row_max[r] {
                    self.row_max[r] = m[r * n..(r + 1) * n].iter().copied().max().unwrap_or(0);
                }
                if old == self.col_max[c] {
                    self.col_max[c] = (0..n).map(|i| m[i * n + c]).max().unwrap_or(0);
                }
            }
            self.matcher.lower(r, c, old - b);
        }
    }

    /// The bottleneck perfect matching of `m` (all line sums equal and positive): the
    /// permutation (row → column) and its smallest entry. `m` may change between calls
    /// only through `subtract`.
    pub fn next(&mut self, m: &[u64], n: usize) -> (Vec<u32>, u64) {
        // Upper bound: every row and column needs an entry ≥ θ.
        if !self.maxima_valid {
            self.compute_maxima(m, n);
        }
        let hi = self.row_max.iter().chain(&self.col_max).copied().min().unwrap_or(u64::MAX);
        let mut theta = self.theta.min(hi);
        loop {
            if theta == 0 {
                // Cannot happen on a doubly stochastic support; report no stage.
                return (self.matcher.mate_row.clone(), 0);
            }
            if self.matcher.perfect(m, theta) {
                break;
            }
            theta = self.matcher.next_threshold(m, theta);
        }
        self.theta = theta;
        let b = matching_min(m, n, &self.matcher.mate_row);
        (self.matcher.mate_row.clone(), b)
    }
}

/// One bottleneck matching from scratch (tests and callers without state).
pub fn bottleneck_matching(m: &[u64], n: usize) -> (Vec<u32>, u64) {
    Bottleneck::new(n).next(m, n)
}

fn matching_min(m: &[u64], n: usize, perm: &[u32]) -> u64 {
    (0..n).map(|r| m[r * n + perm[r] as usize]).min().unwrap_or(0)
}

/// Peel stages off `m` (all line sums equal `line`) in place, stopping when nothing is
/// left, when the bottleneck falls below `stop_below`, or after `max_stages` stages.
/// Returns the line sum that remains.
pub fn decompose(m: &mut [u64], n: usize, mut line: u64, stop_below: u64, max_stages: usize, out: &mut Vec<Stage>) -> u64 {
    let mut bottleneck = Bottleneck::new(n);
    let start = out.len();
    while line > 0 && out.len() - start < max_stages {
        let (perm, b) = bottleneck.next(m, n);
        if b == 0 || b < stop_below {
            break;
        }
        bottleneck.subtract(m, n, &perm, b);
        line -= b;
        out.push(Stage { perm, weight: b });
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::fast::server_matrix::embed_doubly_stochastic;

    #[test]
    fn reconstructs_the_matrix() {
        let n = 4;
        let orig = vec![0, 5, 3, 6, 4, 0, 7, 3, 2, 8, 0, 4, 8, 1, 4, 0];
        let mut m = orig.clone();
        let line = embed_doubly_stochastic(&mut m, n);
        let full = m.clone();
        let mut stages = Vec::new();
        let left = decompose(&mut m, n, line, 1, usize::MAX, &mut stages);
        assert_eq!(left, 0);
        assert!(m.iter().all(|&v| v == 0));
        let mut sum = vec![0u64; n * n];
        for st in &stages {
            let mut seen = vec![false; n];
            for (r, &c) in st.perm.iter().enumerate() {
                assert!(!seen[c as usize]);
                seen[c as usize] = true;
                sum[r * n + c as usize] += st.weight;
            }
        }
        assert_eq!(sum, full);
        assert!(stages.len() <= n * n - 2 * n + 2);
        // Bottleneck: the first stage's weight is the max-min over all permutations.
        let mut best = 0;
        for p in permutations(n) {
            best = best.max((0..n).map(|r| full[r * n + p[r]]).min().unwrap());
        }
        assert_eq!(stages[0].weight, best);
    }

    proptest::proptest! {
        /// The maxima `subtract` keeps up to date equal a fresh scan after every stage.
        #[test]
        fn subtract_keeps_line_maxima_exact(n in 1usize..9, vals in proptest::collection::vec(0u64..6, 64)) {
            let mut m: Vec<u64> = (0..n * n).map(|k| vals[k % vals.len()] * (k as u64 % 3)).collect();
            let line = embed_doubly_stochastic(&mut m, n);
            let mut left = line;
            let mut bn = Bottleneck::new(n);
            while left > 0 {
                let (perm, b) = bn.next(&m, n);
                proptest::prop_assert!(b > 0);
                bn.subtract(&mut m, n, &perm, b);
                left -= b;
                let mut fresh = Bottleneck::new(n);
                fresh.compute_maxima(&m, n);
                proptest::prop_assert_eq!(&bn.row_max, &fresh.row_max);
                proptest::prop_assert_eq!(&bn.col_max, &fresh.col_max);
            }
            proptest::prop_assert!(m.iter().all(|&v| v == 0));
        }

        /// Every stage (graph patched between stages, not rebuilt) is a bottleneck
        /// matching of what remains: its weight is the max-min over all permutations.
        #[test]
        fn every_stage_is_a_bottleneck_matching(n in 1usize..6, vals in proptest::collection::vec(0u64..9, 36)) {
            let mut m: Vec<u64> = (0..n * n).map(|k| vals[k]).collect();
            let line = embed_doubly_stochastic(&mut m, n);
            let mut left = line;
            let mut bn = Bottleneck::new(n);
            let perms = permutations(n);
            while left > 0 {
                let best = perms.iter().map(|p| (0..n).map(|r| m[r * n + p[r]]).min().unwrap()).max().unwrap();
                let (perm, b) = bn.next(&m, n);
                proptest::prop_assert_eq!(b, best);
                proptest::prop_assert_eq!(b, matching_min(&m, n, &perm));
                bn.subtract(&mut m, n, &perm, b);
                left -= b;
            }
        }
    }

    /// Largest θ with a perfect matching on the entries ≥ θ (binary search over the
    /// entries, plain augmenting paths): the bottleneck value, found independently.
    fn reference_bottleneck(m: &[u64], n: usize) -> u64 {
        fn augment(r: usize, m: &[u64], n: usize, theta: u64, seen: &mut [bool], mate: &mut [usize]) -> bool {
            for c in 0..n {
                if m[r * n + c] >= theta && !seen[c] {
                    seen[c] = true;
                    if mate[c] == usize::MAX || augment(mate[c], m, n, theta, seen, mate) {
                        mate[c] = r;
                        return true;
                    }
                }
            }
            false
        }
        let perfect = |theta: u64| {
            let mut mate = vec![usize::MAX; n];
            (0..n).all(|r| augment(r, m, n, theta, &mut vec![false; n], &mut mate))
        };
        let mut values: Vec<u64> = m.iter().copied().filter(|&v| v > 0).collect();
        values.sort_unstable();
        values.dedup();
        let (mut lo, mut hi) = (0, values.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if perfect(values[mid - 1]) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0 { 0 } else { values[lo - 1] }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        /// Past 64 columns (rows of the graph span several words, and the DFS skips whole
        /// words by layer): every stage is a bottleneck matching, and the stages add up to
        /// the matrix.
        #[test]
        fn wide_matrices_decompose_into_bottleneck_matchings(n in 60usize..140, sparsity in 0u64..4, seed in 0u64..1000) {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state };
            let mut m: Vec<u64> = (0..n * n).map(|_| { let v = next(); if v % 4 < sparsity { 0 } else { v % 1000 } }).collect();
            let line = embed_doubly_stochastic(&mut m, n);
            let full = m.clone();
            let mut bn = Bottleneck::new(n);
            let (mut left, mut sum, mut stage) = (line, vec![0u64; n * n], 0);
            while left > 0 {
                let (perm, b) = bn.next(&m, n);
                proptest::prop_assert!(b > 0);
                // The reference is slow: check the first stages and every 16th.
                if stage < 4 || stage % 16 == 0 {
                    proptest::prop_assert_eq!(b, reference_bottleneck(&m, n));
                }
                let mut seen = vec![false; n];
                for (r, &c) in perm.iter().enumerate() {
                    proptest::prop_assert!(!seen[c as usize]);
                    seen[c as usize] = true;
                    sum[r * n + c as usize] += b;
                }
                bn.subtract(&mut m, n, &perm, b);
                left -= b;
                stage += 1;
            }
            proptest::prop_assert_eq!(sum, full);
        }
    }

    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let mut out = Vec::new();
        for p in permutations(n - 1) {
            for i in 0..n {
                let mut q = p.clone();
                q.insert(i, n - 1);
                out.push(q);
            }
        }
        out
    }
}
