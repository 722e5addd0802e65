//! Skew statistics: SABRE's max-to-mean ratios (send, recv, overall) and Gini.
//!
//! SABRE §4: for each rank i, `s_i` is the total inter-node volume it sends and
//! `r_i` the total inter-node volume it receives (blocks to or from ranks on other
//! servers). Send-MTM = P·max_i s_i / Σ_j s_j, Recv-MTM likewise over `r`, and
//! MTM = max(Send-MTM, Recv-MTM). Ratios are kept exact (integers) so that a
//! selector compares them without floating point.
use super::Traffic;
use crate::error::Result;
use crate::invalid;
use crate::topology::Cluster;
use std::cmp::Ordering;

/// An exact max-to-mean ratio `ranks · max / sum`. With no inter-node volume at all
/// (`sum == 0`) the ratio is defined as 1: nothing is skewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtmRatio {
    pub max: u64,
    pub sum: u64,
    pub ranks: u64,
}

impl MtmRatio {
    /// Numerator and denominator of the ratio (u128: `ranks · max` exceeds u64).
    fn fraction(&self) -> (u128, u128) {
        if self.sum == 0 {
            (1, 1)
        } else {
            (self.ranks as u128 * self.max as u128, self.sum as u128)
        }
    }
    /// For display only; decisions use `cmp_milli` / `cmp`.
    pub fn to_f64(&self) -> f64 {
        let (n, d) = self.fraction();
        n as f64 / d as f64
    }
    /// Compare the ratio with `milli / 1000` exactly.
    pub fn cmp_milli(&self, milli: u32) -> Ordering {
        let (n, d) = self.fraction();
        // n ≤ 2^84, so n·1000 < 2^94; d < 2^64, so milli·d < 2^96: no overflow.
        (n * 1000).cmp(&(milli as u128 * d))
    }
    /// The ratio rounded down to thousandths (for meta fields and reports).
    pub fn milli(&self) -> u128 {
        let (n, d) = self.fraction();
        n * 1000 / d
    }
}

impl PartialOrd for MtmRatio {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MtmRatio {
    /// Exact comparison by cross-multiplication of `max/sum` (the rank counts are
    /// equal for the ratios of one matrix; they are included for generality).
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = self.fraction();
        let (c, d) = other.fraction();
        // Compare a/b with c/d where a, c may reach 2^84: divide out the rank factors
        // first when they are equal so every product fits u128.
        if self.sum != 0 && other.sum != 0 && self.ranks == other.ranks {
            (self.max as u128 * other.sum as u128).cmp(&(other.max as u128 * self.sum as u128))
        } else {
            // Values here are (1,1) vs a real ratio, or ranks differ: use a wide comparison.
            mul_wide(a, d).cmp(&mul_wide(c, b))
        }
    }
}

/// Full 256-bit product of two u128 as (high, low) words.
fn mul_wide(a: u128, b: u128) -> (u128, u128) {
    let mask = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & mask);
    let (b1, b0) = (b >> 64, b & mask);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 64) + (p01 & mask) + (p10 & mask);
    let low = (p00 & mask) | ((mid & mask) << 64);
    let high = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    (high, low)
}

/// SABRE's MTM of one matrix on one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mtm {
    pub send: MtmRatio,
    pub recv: MtmRatio,
}

impl Mtm {
    /// MTM = max(Send-MTM, Recv-MTM).
    pub fn overall(&self) -> MtmRatio {
        self.send.max(self.recv)
    }
}

/// Inter-node volume sent and received by each rank: (s_i, r_i).
pub fn inter_node_volumes(traffic: &Traffic, cluster: &Cluster) -> Result<(Vec<u64>, Vec<u64>)> {
    let n = traffic.n();
    if n != cluster.num_gpus() as usize {
        return invalid!("traffic matrix is {n}×{n} but cluster {} has {} GPUs", cluster.name, cluster.num_gpus());
    }
    let g = cluster.gpus_per_server as usize;
    let mut send = vec![0u64; n];
    let mut recv = vec![0u64; n];
    for (i, row) in traffic.data().chunks_exact(n).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            if i / g != j / g {
                // Row and column sums are checked to fit u64 when the matrix is built.
                send[i] += v;
                recv[j] += v;
            }
        }
    }
    Ok((send, recv))
}

fn ratio_of(volumes: &[u64]) -> MtmRatio {
    MtmRatio {
        max: volumes.iter().copied().max().unwrap_or(0),
        // The total of the matrix fits u64, so does any sum of its inter-node parts.
        sum: volumes.iter().sum(),
        ranks: volumes.len() as u64,
    }
}

/// Send-, Recv- and overall MTM (SABRE §4) of `traffic` on `cluster`.
pub fn mtm(traffic: &Traffic, cluster: &Cluster) -> Result<Mtm> {
    let (s, r) = inter_node_volumes(traffic, cluster)?;
    Ok(Mtm { send: ratio_of(&s), recv: ratio_of(&r) })
}

/// Gini coefficient of the pair sizes (all P×P entries, the diagonal included):
/// 0 when every pair exchanges the same amount, → 1 when one pair carries everything.
/// Computed exactly as Σ_k (2k − n − 1)·x_(k) / (n · Σ x) over the sorted entries.
pub fn gini(traffic: &Traffic) -> f64 {
    let mut x: Vec<u64> = traffic.data().to_vec();
    x.sort_unstable();
    let n = x.len() as i128;
    let total: i128 = x.iter().map(|&v| v as i128).sum();
    if total == 0 {
        return 0.0;
    }
    // |coefficient| < 2^41 and Σx < 2^64: the sum stays below 2^106.
    let num: i128 = x.iter().enumerate().map(|(k, &v)| (2 * (k as i128 + 1) - n - 1) * v as i128).sum();
    num as f64 / (n as f64 * total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::generators;

    #[test]
    fn balanced_is_one_and_hot_rank_is_high() {
        let c = Cluster::parse("perlmutter:4").unwrap();
        let t = generators::balanced(16, 1000).unwrap();
        let m = mtm(&t, &c).unwrap();
        assert_eq!(m.overall().cmp_milli(1000), Ordering::Equal);
        assert_eq!(gini(&t), 0.0);
        // One rank receives 8× more from remote nodes than the others.
        let mut t = generators::balanced(16, 100).unwrap();
        for i in 4..16 {
            t.set(i, 0, 100 * 71);
        }
        let m = mtm(&t, &c).unwrap();
        assert!(m.recv > m.send);
        assert_eq!(m.overall(), m.recv);
        // r_0 = 12·7100 = 85200; others 12·100 + ... compute directly.
        let (_, r) = inter_node_volumes(&t, &c).unwrap();
        let sum: u64 = r.iter().sum();
        assert_eq!(m.recv.milli(), 16 * 85_200 * 1000 / sum as u128);
        assert!(gini(&t) > 0.3);
    }

    #[test]
    fn single_server_and_empty() {
        let c = Cluster::parse("h200:1").unwrap();
        let t = generators::uniform(8, 1000, 1).unwrap();
        let m = mtm(&t, &c).unwrap();
        assert_eq!(m.overall().cmp_milli(1000), Ordering::Equal);
        assert_eq!(gini(&Traffic::zeros(8)), 0.0);
        assert!(mtm(&Traffic::zeros(4), &c).is_err());
    }

    #[test]
    fn exact_comparisons() {
        let a = MtmRatio { max: u64::MAX, sum: u64::MAX - 1, ranks: 1 << 20 };
        let b = MtmRatio { max: u64::MAX - 1, sum: u64::MAX - 2, ranks: 1 << 20 };
        // (2^64-1)/(2^64-2) < (2^64-2)/(2^64-3)
        assert_eq!(a.cmp(&b), Ordering::Less);
        let one = MtmRatio { max: 0, sum: 0, ranks: 4 };
        let c = MtmRatio { max: 3, sum: 12, ranks: 4 };
        assert_eq!(one.cmp(&c), Ordering::Equal);
        assert_eq!(c.cmp_milli(1000), Ordering::Equal);
        assert_eq!(c.cmp_milli(999), Ordering::Greater);
        let d = MtmRatio { max: 3, sum: 12, ranks: 5 };
        assert_eq!(d.cmp(&c), Ordering::Greater);
        assert_eq!(mul_wide(u128::MAX, 2), (1, u128::MAX - 1));
    }
}
