//! Traffic matrices: P×P bytes, row = sender, column = receiver.
//! Block i→j sits at input offset `row_offset(i, j)` of rank i and at output
//! offset `col_offset(i, j)` of rank j (torch's `all_to_all_single` layout).
pub mod generators;
pub mod stats;

use crate::error::Result;
use crate::invalid;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    n: usize,
    data: Vec<u64>,
}

impl Traffic {
    /// Build from row-major bytes; rejects wrong sizes and any row, column or total sum that overflows u64.
    pub fn new(n: usize, data: Vec<u64>) -> Result<Traffic> {
        if n == 0 {
            return invalid!("traffic matrix must have at least one rank");
        }
        if data.len() != n * n {
            return invalid!("traffic matrix for {n} ranks needs {} entries, got {}", n * n, data.len());
        }
        // Fast path: if even P² copies of the largest entry fit, no sum can overflow.
        let max = data.iter().copied().max().unwrap_or(0);
        if (max as u128) * (data.len() as u128) > u64::MAX as u128 {
            Self::check_sums(n, &data)?;
        }
        Ok(Traffic { n, data })
    }
    fn check_sums(n: usize, data: &[u64]) -> Result<()> {
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
    pub fn zeros(n: usize) -> Traffic {
        Traffic { n, data: vec![0; n * n] }
    }
    /// Parse little-endian u64 bytes (the Python boundary passes numpy's buffer).
    pub fn from_le_bytes(n: usize, bytes: &[u8]) -> Result<Traffic> {
        if bytes.len() != n * n * 8 {
            return invalid!("traffic matrix buffer for {n} ranks needs {} bytes, got {}", n * n * 8, bytes.len());
        }
        let mut data = Vec::with_capacity(n * n);
        data.extend(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())));
        Traffic::new(n, data)
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
        self.data[i * self.n + j] = v;
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
    pub fn aligned(&self, align: u64) -> Result<Traffic> {
        if align == 0 {
            return invalid!("alignment must be positive");
        }
        let mut data = Vec::with_capacity(self.data.len());
        for &v in &self.data {
            match v.checked_add(align - 1) {
                Some(x) => data.push(x / align * align),
                None => return invalid!("aligning {v} bytes to {align} overflows u64"),
            }
        }
        Traffic::new(self.n, data)
    }
    /// Content hash (word-wise, see `plan::hash`, over the size and the entries): ranks compare it.
    pub fn hash(&self) -> u64 {
        let mut h = crate::plan::hash::Fnv64::new();
        h.write_u64(self.n as u64);
        h.write_u64s(&self.data);
        h.finish()
    }
}
