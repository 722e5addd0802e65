//! SABRE Algorithm 1: intra-node greedy traffic balancing and splitting, for one
//! (source node, destination node) subproblem.
//!
//! Blocks (source GPU → destination GPU on the destination node) are taken largest
//! first. A block goes to the proxy GPU with the destination's local index if it fits
//! under that proxy's limit L_max, else to the proxy with the most room left; if it
//! does not fit there either, that proxy takes what fits and the remainder goes back
//! to the front of the queue.
//!
//! With G > m GPUs sharing m NICs the balanced quantity is NIC load (§4): proxy g's
//! limit is α · L_total / (m · k) where k is the number of GPUs on g's NIC, so each
//! NIC's proxies together carry at most α/m of the node-pair volume. With G = m this
//! is the paper's L_max = α · L_total / G.
use std::collections::VecDeque;

/// A block of one (source node, destination node) pair, by local indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub src_local: u32,
    pub dst_local: u32,
    pub len: u64,
}

/// A piece of a block assigned to a proxy: bytes `[offset, offset + len)` of the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub src_local: u32,
    pub dst_local: u32,
    pub offset: u64,
    pub len: u64,
}

/// Per-proxy load limits for a subproblem of `total` bytes (integer, rounded up so the
/// limits always sum to at least `total`).
pub fn limits(total: u64, gpus: u32, nics: u32, alpha_permille: u64) -> Vec<u64> {
    let mut out = Vec::new();
    limits_into(total, gpus, nics, alpha_permille, &mut out);
    out
}

/// `limits` into `out`, reusing its allocation. With k GPUs per NIC on every NIC (the
/// usual case) all limits are equal: one division instead of one per GPU, in 64 bits
/// when the product fits (a 128-bit division costs tens of nanoseconds).
fn limits_into(total: u64, gpus: u32, nics: u32, alpha_permille: u64, out: &mut Vec<u64>) {
    let limit = |gpus_on_nic: u64| {
        let den = 1000u128 * nics as u128 * gpus_on_nic as u128;
        let num = alpha_permille as u128 * total as u128;
        match (u64::try_from(num), u64::try_from(den)) {
            (Ok(num), Ok(den)) => num.div_ceil(den),
            _ => num.div_ceil(den).min(u64::MAX as u128) as u64,
        }
    };
    out.clear();
    if nics > 0 && gpus % nics == 0 {
        out.resize(gpus as usize, limit((gpus / nics) as u64));
        return;
    }
    // GPU g uses NIC g mod nics: the first `gpus mod nics` NICs have one GPU more (with
    // fewer GPUs than NICs, no GPU is on a NIC of `gpus / nics` = 0 GPUs).
    let more = limit((gpus / nics + 1) as u64);
    let fewer = if gpus / nics > 0 { limit((gpus / nics) as u64) } else { more };
    out.extend((0..gpus).map(|g| if g % nics < gpus % nics { more } else { fewer }));
}

/// Reusable buffers for Algorithm 1 (one planner solves N·(N−1) subproblems).
#[derive(Default)]
pub struct Balancer {
    sorted: Vec<Block>,
    keys: Vec<u128>,
    short_keys: Vec<u64>,
    cap: Vec<u64>,
    queue: VecDeque<Piece>,
    load: Vec<u64>,
    out: Vec<(u32, Piece)>,
}

impl Balancer {
    /// Assign `blocks` to `gpus` proxies; returns (proxy, piece) in assignment order.
    /// Deterministic: blocks are ordered by (size desc, source, destination), ties between
    /// proxies go to the lowest index.
    pub fn assign(&mut self, blocks: &[Block], gpus: u32, nics: u32, alpha_permille: u64) -> &[(u32, Piece)] {
        let g = gpus as usize;
        self.out.clear();
        // (size desc, source, destination) as one integer key: a plain integer sort. In 64
        // bits when the local indices take `bits` bits each and every size fits the rest
        // (sizes below 2^58 with 8 GPUs), else in 128.
        self.sorted.clear();
        let bits = (u32::BITS - gpus.saturating_sub(1).leading_zeros()).max(1);
        let short = 2 * bits < 32 && blocks.iter().all(|b| b.len >> (64 - 2 * bits) == 0 && b.src_local < gpus && b.dst_local < gpus);
        if short {
            let (most, mask) = (u64::MAX >> (2 * bits), (1u64 << bits) - 1);
            self.short_keys.clear();
            self.short_keys.extend(blocks.iter().filter(|b| b.len > 0).map(|b| ((most - b.len) << (2 * bits)) | ((b.src_local as u64) << bits) | b.dst_local as u64));
            self.short_keys.sort_unstable();
            self.sorted.extend(self.short_keys.iter().map(|&k| Block { src_local: ((k >> bits) & mask) as u32, dst_local: (k & mask) as u32, len: most - (k >> (2 * bits)) }));
        } else {
            self.keys.clear();
            self.keys.extend(blocks.iter().filter(|b| b.len > 0).map(|b| ((!b.len as u128) << 64) | ((b.src_local as u128) << 32) | b.dst_local as u128));
            self.keys.sort_unstable();
            self.sorted.extend(self.keys.iter().map(|&k| Block { src_local: (k >> 32) as u32, dst_local: k as u32, len: !((k >> 64) as u64) }));
        }
        let total: u64 = self.sorted.iter().map(|b| b.len).sum();
        limits_into(total, gpus, nics, alpha_permille.max(1000), &mut self.cap);
        let cap = &self.cap;
        self.load.clear();
        self.load.resize(g, 0);
        let load = &mut self.load;
        self.queue.clear();
        self.queue.extend(self.sorted.iter().map(|b| Piece { src_local: b.src_local, dst_local: b.dst_local, offset: 0, len: b.len }));
        while let Some(p) = self.queue.pop_front() {
            let pref = p.dst_local as usize;
            if p.len <= cap[pref] - load[pref] {
                load[pref] += p.len;
                self.out.push((pref as u32, p));
                continue;
            }
            // Most room left = least loaded when limits are equal; lowest index on ties.
            let mut best = 0usize;
            for x in 1..g {
                if cap[x] - load[x] > cap[best] - load[best] {
                    best = x;
                }
            }
            let avail = cap[best] - load[best];
            if p.len <= avail {
                load[best] += p.len;
                self.out.push((best as u32, p));
            } else {
                // Limits sum to ≥ total and bytes remain unassigned, so some proxy has room.
                debug_assert!(avail > 0, "limits must leave room while bytes remain");
                let avail = avail.max(1).min(p.len);
                load[best] += avail;
                self.out.push((best as u32, Piece { len: avail, ..p }));
                self.queue.push_front(Piece { offset: p.offset + avail, len: p.len - avail, ..p });
            }
        }
        &self.out
    }
}

/// Algorithm 1 for one subproblem: the pieces of each proxy, in assignment order.
pub fn assign(blocks: &[Block], gpus: u32, nics: u32, alpha_permille: u64) -> Vec<Vec<Piece>> {
    let mut out: Vec<Vec<Piece>> = vec![Vec::new(); gpus as usize];
    for &(p, piece) in Balancer::default().assign(blocks, gpus, nics, alpha_permille) {
        out[p as usize].push(piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(a: &[Vec<Piece>]) -> Vec<u64> {
        a.iter().map(|v| v.iter().map(|p| p.len).sum()).collect()
    }

    #[test]
    fn one_hot_block_is_split_evenly() {
        let blocks = [Block { src_local: 0, dst_local: 1, len: 4000 }];
        let a = assign(&blocks, 4, 4, 1050);
        // L_max = 1050: proxy 1 (preferred) is full so the block goes to the least loaded.
        assert_eq!(loads(&a), vec![1050, 1050, 1050, 850]);
        // Every byte exactly once, pieces contiguous in the block.
        let mut pieces: Vec<Piece> = a.iter().flatten().copied().collect();
        pieces.sort_by_key(|p| p.offset);
        let mut at = 0;
        for p in pieces {
            assert_eq!(p.offset, at);
            at += p.len;
        }
        assert_eq!(at, 4000);
    }

    #[test]
    fn preferred_proxy_wins_when_it_fits() {
        let blocks: Vec<Block> = (0..4).map(|d| Block { src_local: 3 - d, dst_local: d, len: 100 }).collect();
        let a = assign(&blocks, 4, 4, 1050);
        for (g, v) in a.iter().enumerate() {
            assert_eq!(v.len(), 1);
            assert_eq!(v[0].dst_local, g as u32);
        }
    }

    /// The 64-bit sort key and the shared limits give what the 128-bit key and one limit
    /// per GPU (the definitions) give, on random subproblems of every shape.
    #[test]
    fn fast_paths_match_the_definitions() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..400 {
            let gpus = 1 + (next() % 12) as u32;
            // At most one NIC per GPU, as `Cluster` requires (more would leave the limits too
            // little room, a shape no cluster reaches).
            let nics = 1 + (next() % u64::from(gpus.min(10))) as u32;
            let alpha = 1000 + next() % 200;
            // Sizes up to 2^60 in some cases (at most 15 blocks: the total fits 64 bits):
            // the 128-bit key path.
            let (top, most) = if case % 5 == 0 { (60, 16) } else { (24, 40) };
            let blocks: Vec<Block> = (0..next() % most).map(|_| Block { src_local: (next() % gpus as u64) as u32, dst_local: (next() % gpus as u64) as u32, len: next() >> (64 - top) }).collect();
            let total: u64 = blocks.iter().map(|b| b.len).sum();
            let per_nic: Vec<u128> = (0..nics).map(|n| (0..gpus).filter(|g| g % nics == n).count() as u128).collect();
            let want: Vec<u64> = (0..gpus).map(|g| (alpha as u128 * total as u128).div_ceil(1000 * nics as u128 * per_nic[(g % nics) as usize]).min(u64::MAX as u128) as u64).collect();
            assert_eq!(limits(total, gpus, nics, alpha), want, "gpus {gpus} nics {nics}");
            let mut sorted: Vec<Block> = blocks.iter().copied().filter(|b| b.len > 0).collect();
            sorted.sort_by_key(|b| (std::cmp::Reverse(b.len), b.src_local, b.dst_local));
            let mut balancer = Balancer::default();
            let out = balancer.assign(&blocks, gpus, nics, alpha).to_vec();
            // Whole blocks are taken in key order; a block's first piece starts at offset 0.
            let firsts: Vec<(u32, u32)> = out.iter().filter(|(_, p)| p.offset == 0).map(|(_, p)| (p.src_local, p.dst_local)).collect();
            let by_key: Vec<(u32, u32)> = sorted.iter().map(|b| (b.src_local, b.dst_local)).collect();
            assert_eq!(firsts, by_key, "case {case}");
            let mut load = vec![0u64; gpus as usize];
            out.iter().for_each(|(p, x)| load[*p as usize] += x.len);
            assert_eq!(load.iter().sum::<u64>(), total);
            assert!(load.iter().zip(&want).all(|(l, c)| l <= c), "case {case}: loads within the limits");
        }
    }

    #[test]
    fn shared_nics_balance_nic_load() {
        // 6 GPUs on 4 NICs: NICs 0 and 1 have two GPUs, NICs 2 and 3 one each.
        let l = limits(1200, 6, 4, 1000);
        assert_eq!(l, vec![150, 150, 300, 300, 150, 150]);
        let blocks = [Block { src_local: 5, dst_local: 0, len: 1200 }];
        let a = assign(&blocks, 6, 4, 1000);
        let ld = loads(&a);
        let nic: Vec<u64> = (0..4).map(|n| (0..6).filter(|g| g % 4 == n).map(|g| ld[g]).sum()).collect();
        assert_eq!(nic, vec![300, 300, 300, 300]);
    }
}
