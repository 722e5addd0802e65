//! The symbolic memory of one writable (rank, buffer): an interval map from
//! byte offset to runs of known provenance, with the hazard bookkeeping the
//! ordering checks need (the last writer and every reader since that write).
//! Bytes not covered by any run have never been written.
use super::contents::Content;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Run {
    pub end: u64,
    pub content: Content,
    /// Transfer that last wrote these bytes.
    pub writer: u32,
    /// Transfers that read these bytes since `writer` wrote them (a later write must wait for them).
    pub readers: Vec<u32>,
}

/// A contiguous piece of a read: `[lo, hi)` in the buffer read, its provenance,
/// and who wrote it (None for Input, which nobody writes).
#[derive(Clone, Debug)]
pub struct Piece {
    pub lo: u64,
    pub hi: u64,
    pub content: Content,
    pub writer: Option<u32>,
}

#[derive(Default, Debug)]
pub struct Region {
    runs: BTreeMap<u64, Run>,
}

impl Region {
    /// Make `x` a run boundary (a no-op when no run straddles it).
    fn split_at(&mut self, x: u64) {
        let tail = match self.runs.range_mut(..x).next_back() {
            Some((&start, run)) if run.end > x => {
                let tail = Run { end: run.end, content: run.content.shifted(x - start), writer: run.writer, readers: run.readers.clone() };
                run.end = x;
                tail
            }
            _ => return,
        };
        self.runs.insert(x, tail);
    }

    /// Whether no run overlaps `[lo, hi)` (never-written bytes only).
    pub fn is_empty_in(&self, lo: u64, hi: u64) -> bool {
        match self.runs.range(..hi).next_back() {
            None => true,
            Some((_, run)) => run.end <= lo,
        }
    }

    /// Read `[lo, hi)` as `reader`: append its pieces to `out`, remember the
    /// reader, or return the first never-written gap.
    pub fn read(&mut self, lo: u64, hi: u64, reader: u32, out: &mut Vec<Piece>) -> Result<(), (u64, u64)> {
        if lo == hi {
            return Ok(());
        }
        self.split_at(lo);
        self.split_at(hi);
        let mut at = lo;
        for (&start, run) in self.runs.range_mut(lo..hi) {
            if start > at {
                return Err((at, start));
            }
            if run.readers.last() != Some(&reader) {
                run.readers.push(reader);
            }
            out.push(Piece { lo: start, hi: run.end, content: run.content.clone(), writer: Some(run.writer) });
            at = run.end;
        }
        if at < hi {
            return Err((at, hi));
        }
        Ok(())
    }

    /// The runs overlapping `[lo, hi)`, cut at `lo`, `hi` and every offset in `cuts`
    /// (offsets outside the range are ignored), as `(start, run)`.
    pub fn runs_in(&mut self, lo: u64, hi: u64, cuts: &[u64]) -> impl Iterator<Item = (&u64, &mut Run)> {
        if !self.is_empty_in(lo, hi) {
            self.split_at(lo);
            self.split_at(hi);
            for &c in cuts {
                if c > lo && c < hi {
                    self.split_at(c);
                }
            }
        }
        self.runs.range_mut(lo..hi)
    }

    /// Replace `[lo, hi)` by the given runs (which must tile a subset of it).
    pub fn overwrite(&mut self, lo: u64, hi: u64, new_runs: impl Iterator<Item = (u64, Run)>) {
        if !self.is_empty_in(lo, hi) {
            self.split_at(lo);
            self.split_at(hi);
            let old: Vec<u64> = self.runs.range(lo..hi).map(|(&s, _)| s).collect();
            for s in old {
                self.runs.remove(&s);
            }
        }
        for (start, run) in new_runs {
            if run.end > start {
                self.runs.insert(start, run);
            }
        }
    }

    /// Add runs inside a range known to be empty (`is_empty_in`): the common case, one tree insert each.
    pub fn insert_into_empty(&mut self, new_runs: impl Iterator<Item = (u64, Run)>) {
        for (start, run) in new_runs {
            if run.end > start {
                self.runs.insert(start, run);
            }
        }
    }

    /// All runs in offset order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &Run)> {
        self.runs.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn run(end: u64, rank: u32, off: u64, writer: u32) -> Run {
        Run { end, content: Content::input(rank, off), writer, readers: vec![] }
    }
    #[test]
    fn reads_split_runs_and_find_gaps() {
        let mut r = Region::default();
        r.overwrite(10, 20, std::iter::once((10, run(20, 1, 100, 7))));
        let mut out = vec![];
        r.read(12, 15, 9, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].lo, out[0].hi, out[0].content.off, out[0].writer), (12, 15, 102, Some(7)));
        assert_eq!(r.read(5, 15, 9, &mut out), Err((5, 10)));
        assert_eq!(r.read(18, 25, 9, &mut out), Err((20, 25)));
        // The reader is remembered only on the bytes it read.
        let readers: Vec<(u64, Vec<u32>)> = r.iter().map(|(&s, x)| (s, x.readers.clone())).collect();
        assert_eq!(readers[0], (10, vec![]));
        assert_eq!(readers[1].1, vec![9]);
        r.overwrite(11, 19, std::iter::once((11, run(19, 2, 0, 8))));
        let starts: Vec<(u64, u64, u32)> = r.iter().map(|(&s, x)| (s, x.end, x.writer)).collect();
        assert_eq!(starts, vec![(10, 11, 7), (11, 19, 8), (19, 20, 7)]);
    }
}
