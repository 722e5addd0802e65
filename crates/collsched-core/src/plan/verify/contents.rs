//! Symbolic byte contents. A run of bytes is described by where its first
//! byte came from; byte `k` of the run came from `off + k` (copies never
//! reorder bytes inside a segment, so provenance is linear along a run).
use std::rc::Rc;

/// Whose input a byte is made of: one rank (copy collectives, or a not yet
/// reduced contribution), or the element-wise sum over a set of ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    One(u32),
    /// Bitset over ranks with at least two members (single ranks are always `One`,
    /// so equal sets compare equal).
    Sum(Rc<[u64]>),
}

impl Origin {
    fn bits(&self, ranks: u32) -> Vec<u64> {
        match self {
            Origin::One(r) => {
                let mut b = vec![0u64; words(ranks)];
                b[(*r / 64) as usize] |= 1 << (r % 64);
                b
            }
            Origin::Sum(b) => b.to_vec(),
        }
    }

    fn from_bits(bits: Vec<u64>) -> Origin {
        let members: u32 = bits.iter().map(|w| w.count_ones()).sum();
        if members == 1 {
            let (w, word) = bits.iter().enumerate().find(|(_, w)| **w != 0).expect("one member");
            Origin::One(w as u32 * 64 + word.trailing_zeros())
        } else {
            Origin::Sum(bits.into())
        }
    }

    /// Every rank of the collective: what a finished reduction holds.
    pub fn all(ranks: u32) -> Origin {
        let mut bits = vec![0u64; words(ranks)];
        for r in 0..ranks {
            bits[(r / 64) as usize] |= 1 << (r % 64);
        }
        Origin::from_bits(bits)
    }

    /// The sum of two partial sums; `Err(rank)` names a rank counted twice.
    pub fn add(&self, other: &Origin, ranks: u32) -> Result<Origin, u32> {
        let mut a = self.bits(ranks);
        let b = other.bits(ranks);
        for (w, (x, y)) in a.iter_mut().zip(&b).enumerate() {
            let both = *x & y;
            if both != 0 {
                return Err(w as u32 * 64 + both.trailing_zeros());
            }
            *x |= y;
        }
        Ok(Origin::from_bits(a))
    }

    pub fn describe(&self, ranks: u32) -> String {
        match self {
            Origin::One(r) => format!("rank {r}'s input"),
            Origin::Sum(bits) => {
                let members: Vec<u32> = (0..ranks).filter(|r| bits[(r / 64) as usize] >> (r % 64) & 1 == 1).collect();
                if members.len() as u32 == ranks {
                    return format!("the sum over all {ranks} ranks' inputs");
                }
                let shown: Vec<String> = members.iter().take(8).map(|r| r.to_string()).collect();
                let more = if members.len() > 8 { format!(", … ({} ranks)", members.len()) } else { String::new() };
                format!("the sum of ranks {{{}{more}}}' inputs", shown.join(", "))
            }
        }
    }
}

fn words(ranks: u32) -> usize {
    (ranks as usize).div_ceil(64).max(1)
}

/// Provenance of the first byte of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    pub origin: Origin,
    /// Input offset (in the origin ranks' input buffers) of the run's first byte.
    pub off: u64,
}

impl Content {
    pub fn input(rank: u32, off: u64) -> Content {
        Content { origin: Origin::One(rank), off }
    }
    /// The same provenance `d` bytes further along the run.
    pub fn shifted(&self, d: u64) -> Content {
        Content { origin: self.origin.clone(), off: self.off + d }
    }
    pub fn describe(&self, len: u64, ranks: u32) -> String {
        format!("{}[{:#x}..{:#x})", self.origin.describe(ranks), self.off, self.off + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sums_are_canonical_and_detect_double_counting() {
        let a = Origin::One(3);
        let b = Origin::One(70);
        let ab = a.add(&b, 100).unwrap();
        assert!(matches!(ab, Origin::Sum(_)));
        assert_eq!(ab.add(&Origin::One(70), 100), Err(70));
        assert_eq!(Origin::all(1), Origin::One(0));
        let all2 = Origin::One(0).add(&Origin::One(1), 2).unwrap();
        assert_eq!(all2, Origin::all(2));
        assert!(all2.describe(2).contains("all 2 ranks"));
    }
}
