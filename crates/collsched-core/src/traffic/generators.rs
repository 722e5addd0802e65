//! Seeded, reproducible traffic generators. Generators may use floating point
//! (they make inputs, not planning decisions) but are bit-reproducible from the seed.
use super::Traffic;
use crate::error::Result;
use crate::invalid;

/// xoshiro256** seeded by splitmix64: small, fast, identical on every platform.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }
    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }
    /// Uniform in [0, 1) with 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform integer in [0, n) without modulo bias worth caring about (n << 2^64).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

fn check_mean(mean: u64) -> Result<()> {
    if mean > (1u64 << 56) {
        return invalid!("mean pair size {mean} is too large (at most 2^56 bytes)");
    }
    Ok(())
}

/// Largest rank count a generator builds: an 8192² matrix is already 512 MiB.
pub const MAX_GENERATED_RANKS: usize = 8192;

fn check_n(n: usize) -> Result<()> {
    if n == 0 {
        return invalid!("traffic matrix must have at least one rank");
    }
    if n > MAX_GENERATED_RANKS {
        return invalid!("cannot generate a traffic matrix for {n} ranks (at most {MAX_GENERATED_RANKS})");
    }
    Ok(())
}

/// Every pair (including self) exchanges exactly `bytes`.
pub fn balanced(n: usize, bytes: u64) -> Result<Traffic<'static>> {
    check_n(n)?;
    Traffic::new(n, vec![bytes; n * n])
}

/// Scale non-negative weights so the mean entry is `mean` bytes (rounded per entry).
fn scale_to_mean(n: usize, weights: Vec<f64>, mean: u64) -> Result<Traffic<'static>> {
    check_mean(mean)?;
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 {
        return Traffic::new(n, vec![0; n * n]);
    }
    let k = mean as f64 * (n * n) as f64 / sum;
    Traffic::new(n, weights.into_iter().map(|w| (w * k).round() as u64).collect())
}

/// FAST/FLASH "random" workload: i.i.d. uniform pair sizes, scaled to `mean`.
pub fn uniform(n: usize, mean: u64, seed: u64) -> Result<Traffic<'static>> {
    check_n(n)?;
    let mut rng = Rng::new(seed);
    let w = (0..n * n).map(|_| rng.next_f64()).collect();
    scale_to_mean(n, w, mean)
}

/// Table for inverse-CDF sampling of Zipf(s) over ranks 1..=r.
struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    fn new(s: f64, r: usize) -> ZipfTable {
        let mut acc = 0.0;
        let mut cdf = Vec::with_capacity(r);
        for k in 1..=r {
            acc += (k as f64).powf(-s);
            cdf.push(acc);
        }
        for c in cdf.iter_mut() {
            *c /= acc;
        }
        ZipfTable { cdf }
    }
    /// A rank in 1..=r.
    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.next_f64();
        self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1) + 1
    }
}

/// Range of the Zipf support used for pair sizes (FLASH §6: sizes drawn over [1, R]).
pub const ZIPF_RANGE: usize = 1000;

/// FAST/FLASH "skewed" workload: i.i.d. Zipf(s) pair sizes over [1, R], scaled to `mean`.
pub fn zipf(n: usize, s: f64, mean: u64, seed: u64) -> Result<Traffic<'static>> {
    if !(s.is_finite() && s >= 0.0) {
        return invalid!("zipf exponent must be a non-negative number, got {s}");
    }
    check_n(n)?;
    let table = ZipfTable::new(s, ZIPF_RANGE);
    let mut rng = Rng::new(seed);
    let w = (0..n * n).map(|_| table.sample(&mut rng) as f64).collect();
    scale_to_mean(n, w, mean)
}

/// Most token-to-expert draws `hot_experts` makes (about a second of sampling).
pub const MAX_ROUTING_DRAWS: u128 = 1 << 27;

/// MoE routing parameters for `hot_experts`.
#[derive(Debug, Clone)]
pub struct MoeRouting {
    pub tokens_per_rank: u64,
    pub top_k: u32,
    /// Total experts, placed in contiguous blocks of `experts / ranks` per GPU.
    pub experts: u32,
    /// Zipf exponent of expert popularity (0 = uniform routing).
    pub skew: f64,
    pub hidden: u64,
    pub dtype_bytes: u64,
}

impl Default for MoeRouting {
    fn default() -> Self {
        MoeRouting { tokens_per_rank: 4096, top_k: 2, experts: 0, skew: 1.0, hidden: 4096, dtype_bytes: 2 }
    }
}

/// MoE dispatch: each rank routes its tokens to `top_k` distinct experts drawn with Zipf
/// popularity shared by all ranks (hot experts ⇒ hot columns, as real gates produce).
/// Popularity order is a seeded permutation so hot experts land on random GPUs.
/// `experts == 0` means 8 experts per GPU.
pub fn hot_experts(n: usize, routing: &MoeRouting, seed: u64) -> Result<Traffic<'static>> {
    check_n(n)?;
    let experts = if routing.experts == 0 { 8 * n as u32 } else { routing.experts };
    if experts as usize % n != 0 {
        return invalid!("{experts} experts do not divide evenly over {n} ranks");
    }
    if routing.top_k == 0 || routing.top_k > experts {
        return invalid!("top_k must be in 1..={experts}, got {}", routing.top_k);
    }
    if !(routing.skew.is_finite() && routing.skew >= 0.0) {
        return invalid!("expert skew must be a non-negative number, got {}", routing.skew);
    }
    let token_bytes = routing.hidden.checked_mul(routing.dtype_bytes);
    let total = token_bytes.and_then(|b| b.checked_mul(routing.tokens_per_rank)).and_then(|b| b.checked_mul(routing.top_k as u64 * n as u64));
    let token_bytes = match (token_bytes, total) {
        (Some(b), Some(_)) => b,
        _ => return invalid!("hot_experts: tokens × top_k × hidden × dtype overflows u64"),
    };
    // Routing is sampled token by token: bound the work so a typo cannot hang the caller.
    let draws = (routing.tokens_per_rank as u128) * (routing.top_k as u128) * (n as u128);
    if draws > MAX_ROUTING_DRAWS {
        return invalid!(
            "hot_experts: {n} ranks × {} tokens × top_k {} is too many routing draws (at most {MAX_ROUTING_DRAWS}); use fewer tokens and a larger hidden size",
            routing.tokens_per_rank,
            routing.top_k
        );
    }
    let mut rng = Rng::new(seed);
    // Seeded permutation: popularity rank -> expert id.
    let mut perm: Vec<u32> = (0..experts).collect();
    for i in (1..perm.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    let table = ZipfTable::new(routing.skew, experts as usize);
    let per_gpu = experts as usize / n;
    let mut data = vec![0u64; n * n];
    let mut chosen: Vec<u32> = Vec::with_capacity(routing.top_k as usize);
    for src in 0..n {
        for _ in 0..routing.tokens_per_rank {
            chosen.clear();
            let mut attempts = 0u32;
            while chosen.len() < routing.top_k as usize {
                let e = if attempts < 32 * routing.top_k {
                    attempts += 1;
                    perm[table.sample(&mut rng) - 1]
                } else {
                    // Steep skew with top_k near the expert count makes rejection sampling crawl:
                    // fill up with the most popular experts not yet chosen.
                    *perm.iter().find(|e| !chosen.contains(e)).expect("top_k <= experts")
                };
                if !chosen.contains(&e) {
                    chosen.push(e);
                }
            }
            for &e in &chosen {
                data[src * n + e as usize / per_gpu] += token_bytes;
            }
        }
    }
    Traffic::new(n, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn reproducible_and_scaled() {
        let a = zipf(16, 0.8, 1 << 20, 7).unwrap();
        let b = zipf(16, 0.8, 1 << 20, 7).unwrap();
        assert_eq!(a, b);
        let mean = a.total() as f64 / 256.0;
        assert!((mean / (1u64 << 20) as f64 - 1.0).abs() < 0.01, "mean {mean}");
        assert_ne!(a, zipf(16, 0.8, 1 << 20, 8).unwrap());
        let u = uniform(8, 1000, 1).unwrap();
        assert!((u.total() as i64 - 64_000).abs() < 64);
    }
    #[test]
    fn hot_experts_bytes() {
        let r = MoeRouting { tokens_per_rank: 100, top_k: 2, experts: 16, skew: 1.2, hidden: 8, dtype_bytes: 2 };
        let t = hot_experts(4, &r, 3).unwrap();
        for i in 0..4 {
            assert_eq!(t.row_sum(i), 100 * 2 * 16);
        }
        assert!(hot_experts(3, &r, 3).is_err());
    }
    #[test]
    fn steep_skew_with_all_experts_chosen_terminates() {
        let r = MoeRouting { tokens_per_rank: 50, top_k: 16, experts: 16, skew: 60.0, hidden: 1, dtype_bytes: 1 };
        let t = hot_experts(2, &r, 1).unwrap();
        assert_eq!(t.row_sum(0), 50 * 16);
        assert_eq!(t.get(0, 0), t.get(0, 1)); // every token reaches all 16 experts: 8 per GPU
    }
    #[test]
    fn oversized_requests_are_rejected_not_attempted() {
        assert!(balanced(MAX_GENERATED_RANKS + 1, 1).unwrap_err().to_string().contains("at most"));
        assert!(uniform(0, 1, 0).is_err());
        let r = MoeRouting { tokens_per_rank: 1 << 40, ..MoeRouting::default() };
        assert!(hot_experts(4, &r, 0).unwrap_err().to_string().contains("routing draws"));
    }
}
