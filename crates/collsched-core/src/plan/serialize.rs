//! Plan serialisation: JSON (readable, small plans) and a compact little-endian
//! binary form (large plans). Both round-trip exactly; the hash is over the binary form.
use super::{Buf, Collective, Op, Plan, Segment, Transfer};
use crate::error::{Error, Result};
use crate::invalid;
use crate::topology::Tier;
use crate::traffic::Traffic;

const MAGIC: &[u8; 8] = b"CSPLAN01";

impl Plan {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plan serialises")
    }
    pub fn from_json(s: &str) -> Result<Plan> {
        let p: Plan = serde_json::from_str(s).map_err(|e| Error::InvalidInput(format!("not a collsched plan JSON: {e}")))?;
        p.check_shape()?;
        Ok(p)
    }

    pub fn to_binary(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(64 + self.transfers.len() * 40 + self.segments.len() * 34 + self.deps.len() * 4));
        w.0.extend_from_slice(MAGIC);
        w.str(&self.algorithm);
        w.u32(self.gpus_per_server);
        w.u64(self.input_hash);
        match &self.collective {
            Collective::AllToAll { traffic } => {
                w.u8(0);
                w.u64(traffic.n() as u64);
                for &v in traffic.data() {
                    w.u64(v);
                }
            }
            Collective::AllGather { ranks, shard_bytes } => {
                w.u8(1);
                w.u32(*ranks);
                w.u64(*shard_bytes);
            }
            Collective::ReduceScatter { ranks, shard_bytes, elem_bytes } => {
                w.u8(2);
                w.u32(*ranks);
                w.u64(*shard_bytes);
                w.u32(*elem_bytes);
            }
            Collective::AllReduce { ranks, bytes, elem_bytes } => {
                w.u8(3);
                w.u32(*ranks);
                w.u64(*bytes);
                w.u32(*elem_bytes);
            }
        }
        w.u64(self.scratch_bytes.len() as u64);
        for &s in &self.scratch_bytes {
            w.u64(s);
        }
        w.u64(self.transfers.len() as u64);
        for t in &self.transfers {
            w.u32(t.src);
            w.u32(t.dst);
            w.u8(t.op as u8);
            w.u8(t.tier as u8);
            w.u32(t.step);
            w.u32(t.seg_begin);
            w.u32(t.seg_end);
            w.u32(t.dep_begin);
            w.u32(t.dep_end);
        }
        w.u64(self.segments.len() as u64);
        for s in &self.segments {
            w.u8(s.src_buf as u8);
            w.u64(s.src_off);
            w.u8(s.dst_buf as u8);
            w.u64(s.dst_off);
            w.u64(s.len);
        }
        w.u64(self.deps.len() as u64);
        for &d in &self.deps {
            w.u32(d);
        }
        w.u64(self.meta.len() as u64);
        for (k, v) in &self.meta {
            w.str(k);
            w.str(v);
        }
        w.0
    }

    pub fn from_binary(b: &[u8]) -> Result<Plan> {
        let mut r = Reader { b, at: 0 };
        if r.take(8)? != MAGIC {
            return invalid!("not a collsched binary plan (bad magic)");
        }
        let algorithm = r.str()?;
        let gpus_per_server = r.u32()?;
        let input_hash = r.u64()?;
        let collective = match r.u8()? {
            0 => {
                let n = r.u64()?;
                let entries = match n.checked_mul(n) {
                    Some(e) if e <= ((b.len() - r.at) / 8) as u64 => e as usize,
                    _ => return invalid!("binary plan is truncated (matrix of {n} ranks)"),
                };
                let data = (0..entries).map(|_| r.u64()).collect::<Result<Vec<_>>>()?;
                Collective::AllToAll { traffic: Traffic::new(n as usize, data)? }
            }
            1 => Collective::AllGather { ranks: r.u32()?, shard_bytes: r.u64()? },
            2 => Collective::ReduceScatter { ranks: r.u32()?, shard_bytes: r.u64()?, elem_bytes: r.u32()? },
            3 => Collective::AllReduce { ranks: r.u32()?, bytes: r.u64()?, elem_bytes: r.u32()? },
            k => return invalid!("binary plan: unknown collective kind {k}"),
        };
        let n = r.len(8)?;
        let scratch_bytes = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>>>()?;
        let n = r.len(30)?;
        let mut transfers = Vec::with_capacity(n);
        for _ in 0..n {
            let src = r.u32()?;
            let dst = r.u32()?;
            let op = Op::from_u8(r.u8()?).ok_or_else(|| Error::InvalidInput("binary plan: bad op".into()))?;
            let tier = Tier::from_u8(r.u8()?).ok_or_else(|| Error::InvalidInput("binary plan: bad tier".into()))?;
            transfers.push(Transfer { src, dst, op, tier, step: r.u32()?, seg_begin: r.u32()?, seg_end: r.u32()?, dep_begin: r.u32()?, dep_end: r.u32()? });
        }
        let n = r.len(26)?;
        let mut segments = Vec::with_capacity(n);
        let buf = |v: u8| Buf::from_u8(v).ok_or_else(|| Error::InvalidInput("binary plan: bad buffer id".into()));
        for _ in 0..n {
            let src_buf = buf(r.u8()?)?;
            let src_off = r.u64()?;
            let dst_buf = buf(r.u8()?)?;
            segments.push(Segment { src_buf, src_off, dst_buf, dst_off: r.u64()?, len: r.u64()? });
        }
        let n = r.len(4)?;
        let deps = (0..n).map(|_| r.u32()).collect::<Result<Vec<_>>>()?;
        let n = r.len(8)?;
        let mut meta = std::collections::BTreeMap::new();
        for _ in 0..n {
            let k = r.str()?;
            meta.insert(k, r.str()?);
        }
        if r.at != b.len() {
            return invalid!("binary plan: {} trailing bytes", b.len() - r.at);
        }
        let p = Plan { algorithm, collective, gpus_per_server, scratch_bytes, transfers, segments, deps, input_hash, meta };
        p.check_shape()?;
        Ok(p)
    }

    /// Structural sanity (index ranges in bounds, steps below `MAX_STEPS`, each transfer's bytes
    /// within 64 bits) so consumers can index and sum without panicking.
    /// Semantic checks live in the verifier.
    pub fn check_shape(&self) -> Result<()> {
        let n = self.num_ranks();
        if self.scratch_bytes.len() != n as usize {
            return invalid!("plan has scratch sizes for {} ranks but its collective has {n}", self.scratch_bytes.len());
        }
        for (i, t) in self.transfers.iter().enumerate() {
            if t.src >= n || t.dst >= n {
                return invalid!("transfer {i}: rank {}→{} outside 0..{n}", t.src, t.dst);
            }
            if t.step >= super::MAX_STEPS {
                return invalid!("transfer {i}: step {} is beyond the {} steps a plan may have", t.step, super::MAX_STEPS);
            }
            if t.seg_begin > t.seg_end || t.seg_end as usize > self.segments.len() {
                return invalid!("transfer {i}: segment range {}..{} out of bounds", t.seg_begin, t.seg_end);
            }
            // A transfer's bytes are a u64 everywhere (`transfer_bytes`, flows, reports).
            if self.segments[t.seg_range()].iter().try_fold(0u64, |acc, s| acc.checked_add(s.len)).is_none() {
                return invalid!("transfer {i}: its segments' bytes overflow 64 bits");
            }
            if t.dep_begin > t.dep_end || t.dep_end as usize > self.deps.len() {
                return invalid!("transfer {i}: dependency range {}..{} out of bounds", t.dep_begin, t.dep_end);
            }
            for &d in &self.deps[t.dep_range()] {
                if d as usize >= self.transfers.len() {
                    return invalid!("transfer {i}: depends on transfer {d}, which does not exist");
                }
            }
        }
        Ok(())
    }
}

struct Writer(Vec<u8>);
impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}
impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() - self.at < n {
            return invalid!("binary plan is truncated");
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    /// A count whose items take at least `item` bytes each; rejects counts the rest cannot hold.
    fn len(&mut self, item: usize) -> Result<usize> {
        let n = self.u64()?;
        if n > ((self.b.len() - self.at) / item.max(1)) as u64 {
            return invalid!("binary plan is truncated (count {n} too large)");
        }
        Ok(n as usize)
    }
    fn str(&mut self) -> Result<String> {
        let n = self.len(1)?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| Error::InvalidInput("binary plan: string is not UTF-8".into()))
    }
}
