//! The server-level matrix and its doubly stochastic embedding (FAST §4.4).
//!
//! After balancing, every GPU of a server behaves the same over scale-out, so
//! the P×P problem collapses to N×N: `S[s][d]` = bytes server s sends to d.
//! Birkhoff's theorem needs equal line sums, so we add phantom traffic to the
//! lighter lines until every row and column sums to the heaviest line: the
//! bottleneck line gets nothing, so the optimum is unchanged. Phantom bytes
//! only shape the decomposition; they never appear in the Plan.

/// `S[s][d]`: bytes the GPUs of server s send to those of server d ≠ s (0 on the
/// diagonal), from the P×P row-major matrix (`Balanced::server` holds the same sums).
pub fn tile_totals(data: &[u64], n: usize, g: usize) -> Vec<u64> {
    let p = n * g;
    let mut out = vec![0u64; n * n];
    for s in 0..n {
        for a in 0..g {
            let row = &data[(s * g + a) * p..(s * g + a + 1) * p];
            for (d, blocks) in row.chunks_exact(g.max(1)).enumerate() {
                if d != s {
                    out[s * n + d] = out[s * n + d].wrapping_add(blocks.iter().fold(0u64, |acc, &v| acc.wrapping_add(v)));
                }
            }
        }
    }
    out
}

/// Row sums and column sums of an N×N matrix.
pub fn line_sums(m: &[u64], n: usize) -> (Vec<u64>, Vec<u64>) {
    let mut rows = vec![0u64; n];
    let mut cols = vec![0u64; n];
    for s in 0..n {
        for d in 0..n {
            let v = m[s * n + d];
            rows[s] += v;
            cols[d] += v;
        }
    }
    (rows, cols)
}

/// The largest row or column sum.
pub fn max_line_sum(m: &[u64], n: usize) -> u64 {
    let (r, c) = line_sums(m, n);
    r.into_iter().chain(c).max().unwrap_or(0)
}

/// Add phantom entries in place so every line sums to the maximum line sum, which
/// is returned. Phantom goes to the diagonal first (a server "sending to itself"
/// is an idle slot, the cheapest kind of phantom), then north-west-corner order:
/// O(N²), deterministic, and it adds at most 2N−1 new entries.
pub fn embed_doubly_stochastic(m: &mut [u64], n: usize) -> u64 {
    let (rows, cols) = line_sums(m, n);
    let line = rows.iter().chain(cols.iter()).copied().max().unwrap_or(0);
    let mut dr: Vec<u64> = rows.iter().map(|r| line - r).collect();
    let mut dc: Vec<u64> = cols.iter().map(|c| line - c).collect();
    for s in 0..n {
        let x = dr[s].min(dc[s]);
        m[s * n + s] += x;
        dr[s] -= x;
        dc[s] -= x;
    }
    let (mut s, mut d) = (0, 0);
    while s < n && d < n {
        let x = dr[s].min(dc[d]);
        m[s * n + d] += x;
        dr[s] -= x;
        dc[d] -= x;
        if dr[s] == 0 {
            s += 1;
        } else {
            d += 1;
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn embedding_keeps_the_bottleneck() {
        let mut m = vec![0, 5, 3, 2, 0, 9, 1, 1, 0];
        let before = m.clone();
        let l = embed_doubly_stochastic(&mut m, 3);
        assert_eq!(l, 12);
        let (r, c) = line_sums(&m, 3);
        assert!(r.iter().chain(c.iter()).all(|&x| x == 12));
        assert!(m.iter().zip(&before).all(|(a, b)| a >= b));
        // The bottleneck column (column 2 sums to 12) received no phantom.
        assert_eq!((0..3).map(|s| m[s * 3 + 2]).collect::<Vec<_>>(), vec![3, 9, 0]);
    }

    proptest::proptest! {
        /// The tile totals the overlapped schedule uses are the balancer's server matrix.
        #[test]
        fn tile_totals_match_the_balancer(servers in 1u32..6, gpus in 1u32..5, seed in 0u64..1000, skew in 0u32..3) {
            let cluster = crate::Cluster::parse(&format!("h200:{servers}")).unwrap();
            let cluster = crate::Cluster { gpus_per_server: gpus, nics_per_server: gpus, ..cluster };
            let p = (servers * gpus) as usize;
            let t = crate::traffic::generators::zipf(p, [0.0, 0.8, 0.99][skew as usize], 1 << 16, seed).unwrap();
            let bal = crate::algo::fast::balance::balance(&t, &cluster);
            proptest::prop_assert_eq!(tile_totals(t.data(), servers as usize, gpus as usize), bal.server);
        }
    }
}
