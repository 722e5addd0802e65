//! A tiny, stable, platform-independent content hash: FNV-style mixing over
//! little-endian u64 words in four independent lanes (so the multiply chains
//! overlap), folded and finished with splitmix64. It detects disagreement
//! between ranks; it is not a cryptographic digest. Values are defined over
//! words, not memory, so every platform computes the same hash; nothing stores
//! them persistently.
pub struct Fnv64 {
    lanes: [u64; LANES],
}

const LANES: usize = 4;
const PRIME: u64 = 0x0000_0100_0000_01b3;
const SEEDS: [u64; LANES] = [0xcbf2_9ce4_8422_2325, 0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9];

#[inline(always)]
fn mix(h: u64, w: u64) -> u64 {
    // Rotating in the high bits keeps them from only ever flowing upwards.
    (h ^ w).wrapping_mul(PRIME).rotate_left(29)
}

fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Fnv64 {
    pub fn new() -> Fnv64 {
        Fnv64 { lanes: SEEDS }
    }
    /// Hash a word slice (lane k takes words k, k+4, ...), then its length.
    #[inline]
    pub fn write_u64s(&mut self, words: &[u64]) {
        self.write_u64s_or(words);
    }
    /// `write_u64s`, returning the bitwise OR of the words: a bound on the largest that
    /// costs nothing beside the multiply chains (a traffic matrix's overflow check).
    #[inline]
    pub fn write_u64s_or(&mut self, words: &[u64]) -> u64 {
        let mut l = self.lanes;
        let mut or = 0;
        let mut chunks = words.chunks_exact(LANES);
        for c in &mut chunks {
            l[0] = mix(l[0], c[0]);
            l[1] = mix(l[1], c[1]);
            l[2] = mix(l[2], c[2]);
            l[3] = mix(l[3], c[3]);
            or |= c[0] | c[1] | c[2] | c[3];
        }
        for (k, &w) in chunks.remainder().iter().enumerate() {
            l[k] = mix(l[k], w);
            or |= w;
        }
        l[0] = mix(l[0], words.len() as u64);
        self.lanes = l;
        or
    }
    /// Hash bytes as little-endian words (the last one zero-padded), then the length.
    pub fn write(&mut self, bytes: &[u8]) {
        let mut l = self.lanes;
        let mut chunks = bytes.chunks_exact(8 * LANES);
        let word = |c: &[u8], k: usize| u64::from_le_bytes(c[8 * k..8 * k + 8].try_into().unwrap());
        for c in &mut chunks {
            l[0] = mix(l[0], word(c, 0));
            l[1] = mix(l[1], word(c, 1));
            l[2] = mix(l[2], word(c, 2));
            l[3] = mix(l[3], word(c, 3));
        }
        for (k, c) in chunks.remainder().chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            l[k] = mix(l[k], u64::from_le_bytes(w));
        }
        l[1] = mix(l[1], bytes.len() as u64);
        self.lanes = l;
    }
    /// Hash four words at once, word k into lane k (a record's fields, packed).
    #[inline(always)]
    pub fn write4(&mut self, w: [u64; LANES]) {
        let l = &mut self.lanes;
        l[0] = mix(l[0], w[0]);
        l[1] = mix(l[1], w[1]);
        l[2] = mix(l[2], w[2]);
        l[3] = mix(l[3], w[3]);
    }
    #[inline]
    pub fn write_u64(&mut self, v: u64) {
        self.lanes[0] = mix(self.lanes[0], v);
        self.lanes[2] = mix(self.lanes[2], !v);
    }
    pub fn finish(&self) -> u64 {
        let mut h = 0u64;
        for &x in &self.lanes {
            h = splitmix64(h ^ x);
        }
        h
    }
}

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn h(f: impl FnOnce(&mut Fnv64)) -> u64 {
        let mut x = Fnv64::new();
        f(&mut x);
        x.finish()
    }
    #[test]
    fn distinguishes_contents_lengths_and_positions() {
        let words: Vec<u64> = (0..37).collect();
        let base = h(|x| x.write_u64s(&words));
        assert_eq!(base, h(|x| x.write_u64s(&words)));
        for k in 0..words.len() {
            let mut w = words.clone();
            w[k] ^= 1 << (k % 64);
            assert_ne!(base, h(|x| x.write_u64s(&w)), "word {k}");
        }
        assert_ne!(base, h(|x| x.write_u64s(&words[..36])));
        let mut swapped = words.clone();
        swapped.swap(0, 4); // same lane, different order
        assert_ne!(base, h(|x| x.write_u64s(&swapped)));
        assert_ne!(h(|x| x.write(b"ab")), h(|x| x.write(b"ab\0")));
        assert_ne!(h(|x| x.write(b"abc")), h(|x| x.write(b"abd")));
        assert_ne!(h(|x| x.write_u64(1)), h(|x| x.write_u64(2)));
        assert_ne!(h(|x| x.write4([1, 2, 3, 4])), h(|x| x.write4([2, 1, 3, 4])));
    }
}
