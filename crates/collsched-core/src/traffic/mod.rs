//! Traffic matrices: P×P bytes, row = sender, column = receiver.
//! Block i→j sits at input offset `row_offset(i, j)` of rank i and at output
//! offset `col_offset(i, j)` of rank j (torch's `all_to_all_single` layout).
pub mod generators;
pub mod stats;

use crate::error::Result;
use crate::invalid;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A P×P matrix whose entries are owned or borrowed: the runtime's per-rank path reads
/// the caller's buffer (numpy's) in place (`Traffic::borrowed`), a Plan keeps its own copy
/// (`Traffic::owned`). Every reader sees `&[u64]` either way.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Traffic<'a> {
    n: usize,
    data: Cow<'a, [u64]>,
    /// `hash()`, when the constructor computed it (in the pass that checks the sums).
    #[serde(skip)]
    hash: Option<u64>,
}

impl PartialEq for Traffic<'_> {
    fn eq(&self, other: &Traffic<'_>) -> bool {
        self.n == other.n && self.data == other.data
    }
}
impl Eq for Traffic<'_> {}

impl Traffic<'static> {
    /// Build from row-major entries; rejects wrong sizes and any row, column or total sum that overflows u64.
    pub fn new(n: usize, data: Vec<u64>) -> Result<Traffic<'static>> {
        let hash = check(n, &data)?;
        Ok(Traffic { n, data: Cow::Owned(data), hash: Some(hash) })
    }
    pub fn zeros(n: usize) -> Traffic<'static> {
        Traffic { n, data: Cow::Owned(vec![0; n * n]), hash: None }
    }
    /// Parse little-endian u64 bytes (for the bindings that take a matrix as bytes).
    pub fn from_le_bytes(n: usize, bytes: &[u8]) -> Result<Traffic<'static>> {
        if bytes.len() != n * n * 8 {
            return invalid!("traffic matrix buffer for {n} ranks needs {} bytes, got {}", n * n * 8, bytes.len());
        }
        let mut data = Vec::with_capacity(n * n);
        data.extend(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())));
        Traffic::new(n, data)
    }
}

/// Check a row-major `n × n` matrix (size; no row, column or total sum past u64) and
/// return its `Traffic::hash`, in one pass over the entries.
fn check(n: usize, data: &[u64]) -> Result<u64> {
    if n == 0 {
        return invalid!("traffic matrix must have at least one rank");
    }
    if data.len() != n * n {
        return invalid!("traffic matrix for {n} ranks needs {} entries, got {}", n * n, data.len());
    }
    // Fast path: the OR of the entries bounds the largest, so if P² copies of it fit, no
    // sum can overflow. The OR rides along the hash's pass, where a separate `max` pass
    // cost more than the hash (docs/runtime.md, "The matrix, read in place").
    let (hash, or) = hash_entries(n, data);
    if (or as u128) * (data.len() as u128) > u64::MAX as u128 {
        check_sums(n, data)?;
    }
    Ok(hash)
}

/// Rows, columns and the total of the row-major `n × n` `data` must fit in u64.
pub(crate) fn check_sums(n: usize, data: &[u64]) -> Result<()> {
    let mut total: u128 = 0;
    let mut cols = vec![0u128; n];
    for i in 0..n {
        let mut row: u128 = 0;
        for (c, &v) in cols.iter_mut().zip(&data[i * n..(i + 1) * n]) {
            row += v as u128;
            *c += v as u128;
        }
        if row > u64::MAX as u128 {
            return invalid!("traffic matrix row {i} sums past 2^64 bytes");
        }
        total += row;
    }
    if let Some(j) = cols.iter().position(|&c| c > u64::MAX as u128) {
        return invalid!("traffic matrix column {j} sums past 2^64 bytes");
    }
    if total > u64::MAX as u128 {
        return invalid!("traffic matrix total sums past 2^64 bytes");
    }
    Ok(())
}

/// `Traffic::hash` of the row-major `n × n` entries `data` (word-wise, see `plan::hash`,
/// over the size and the entries), with the entries' bitwise OR from the same pass.
pub fn hash_entries(n: usize, data: &[u64]) -> (u64, u64) {
    let mut h = crate::plan::hash::Fnv64::new();
    h.write_u64(n as u64);
    let or = h.write_u64s_or(data);
    (h.finish(), or)
}

impl<'a> Traffic<'a> {
    /// Read the row-major `n × n` entries `data` in place (no copy), with `new`'s checks.
    pub fn borrowed(n: usize, data: &'a [u64]) -> Result<Traffic<'a>> {
        let hash = check(n, data)?;
        Ok(Traffic { n, data: Cow::Borrowed(data), hash: Some(hash) })
    }
    /// The same matrix with its own entries (what a Plan keeps): a copy if borrowed.
    pub fn owned(&self) -> Traffic<'static> {
        Traffic { n: self.n, data: Cow::Owned(self.data.to_vec()), hash: self.hash }
    }
    /// `owned`, copying nothing when the entries are owned already.
    pub fn into_owned(self) -> Traffic<'static> {
        Traffic { n: self.n, data: Cow::Owned(self.data.into_owned()), hash: self.hash }
    }
    pub fn to_le_bytes(&self) -> Vec<u8> {
        self.data.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
    pub fn n(&self) -> usize {
        self.n
    }
    pub fn data(&self) -> &[u64] {
        &self.data
    }
    #[inline]
    pub fn get(&self, i: usize, j: usize) -> u64 {
        self.data[i * self.n + j]
    }
    pub fn set(&mut self, i: usize, j: usize, v: u64) {
        self.data.to_mut()[i * self.n + j] = v;
        self.hash = None;
    }
    pub fn row_sum(&self, i: usize) -> u64 {
        self.data[i * self.n..(i + 1) * self.n].iter().sum()
    }
    pub fn col_sum(&self, j: usize) -> u64 {
        (0..self.n).map(|i| self.get(i, j)).sum()
    }
    /// Number of nonzero blocks (diagonal included): an upper bound producers size their plan by.
    pub fn nonzero_blocks(&self) -> usize {
        self.data.iter().filter(|&&b| b > 0).count()
    }
    pub fn total(&self) -> u64 {
        self.data.iter().sum()
    }
    /// Input buffer size of each rank.
    pub fn input_sizes(&self) -> Vec<u64> {
        (0..self.n).map(|i| self.row_sum(i)).collect()
    }
    /// Output buffer size of each rank: the column sums, in one row-major pass (summing
    /// column by column strides through the whole matrix once per rank: 8 ms at 1024 ranks).
    pub fn output_sizes(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.n];
        for row in self.data.chunks_exact(self.n.max(1)) {
            for (o, &v) in out.iter_mut().zip(row) {
                *o += v;
            }
        }
        out
    }
    /// Offsets of each block in its sender's input: `send_offsets()[i*n+j]`.
    pub fn send_offsets(&self) -> Vec<u64> {
        let mut off = Vec::with_capacity(self.data.len());
        for row in self.data.chunks_exact(self.n) {
            let mut acc = 0;
            off.extend(row.iter().map(|&v| {
                let o = acc;
                acc += v;
                o
            }));
        }
        off
    }
    /// Offsets of each block in its receiver's output: `recv_offsets()[i*n+j]`.
    /// Computed row by row with running column sums (sequential memory access).
    pub fn recv_offsets(&self) -> Vec<u64> {
        let mut off = Vec::with_capacity(self.data.len());
        let mut acc = vec![0u64; self.n];
        for row in self.data.chunks_exact(self.n) {
            off.extend_from_slice(&acc);
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v;
            }
        }
        off
    }
    /// Round every entry up to a multiple of `align` bytes (e.g. element size or cache line).
    pub fn aligned(&self, align: u64) -> Result<Traffic<'static>> {
        if align == 0 {
            return invalid!("alignment must be positive");
        }
        let mut data = Vec::with_capacity(self.data.len());
        for &v in self.data.iter() {
            match v.checked_add(align - 1) {
                Some(x) => data.push(x / align * align),
                None => return invalid!("aligning {v} bytes to {align} overflows u64"),
            }
        }
        Traffic::new(self.n, data)
    }
    /// Content hash (word-wise, see `plan::hash`, over the size and the entries): ranks
    /// compare it. Known from construction unless the matrix was changed (`set`) or read back.
    pub fn hash(&self) -> u64 {
        self.hash.unwrap_or_else(|| hash_entries(self.n, &self.data).0)
    }}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_matrix_is_the_owned_one() {
        let t = generators::zipf(12, 0.8, 1 << 20, 7).unwrap();
        let b = Traffic::borrowed(12, t.data()).unwrap();
        assert_eq!(b, t);
        assert_eq!(b.hash(), t.hash());
        assert_eq!(b.output_sizes(), t.output_sizes());
        let o = b.owned();
        assert_eq!(o, t);
        assert_eq!(o.clone().into_owned().data(), t.data());
    }

    #[test]
    fn the_hash_is_the_entries_and_follows_changes() {
        let mut t = generators::uniform(6, 1000, 3).unwrap();
        let stored = t.hash();
        let fresh = hash_entries(6, t.data()).0;
        assert_eq!(stored, fresh);
        // Read back (no stored hash) and computed again: the same value.
        let back: Traffic = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.hash(), stored);
        t.set(2, 3, t.get(2, 3) + 1);
        assert_ne!(t.hash(), stored);
        assert_eq!(t.hash(), hash_entries(6, t.data()).0);
        // The size is hashed too, not only the words.
        assert_ne!(hash_entries(1, &[0; 4]).0, hash_entries(2, &[0; 4]).0);
    }

    #[test]
    fn borrowed_and_owned_refuse_the_same_overflows() {
        const BIG: u64 = 1 << 63;
        let cases: [(&[(usize, usize)], &str); 3] = [(&[(0, 0), (0, 2)], "row 0"), (&[(0, 1), (2, 1)], "column 1"), (&[(0, 0), (1, 1)], "total")];
        for (cells, words) in cases {
            let mut d = vec![0u64; 9];
            for &(i, j) in cells {
                d[i * 3 + j] = BIG;
            }
            let e1 = Traffic::borrowed(3, &d).unwrap_err().to_string();
            let e2 = Traffic::new(3, d.clone()).unwrap_err().to_string();
            assert_eq!(e1, e2);
            assert!(e1.contains(&format!("{words} sums past 2^64")), "{e1}");
        }
        // Fits exactly (total 2^64 - 1): the fast path defers to the exact sums, which pass.
        let d = [BIG - 1, 0, 0, 0, BIG, 0, 0, 0, 0];
        assert_eq!(Traffic::borrowed(3, &d).unwrap().total(), u64::MAX);
        assert!(Traffic::borrowed(3, &d[..8]).unwrap_err().to_string().contains("needs 9 entries, got 8"));
        assert!(Traffic::borrowed(0, &[]).is_err());
    }
}
