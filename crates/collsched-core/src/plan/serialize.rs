//! Plan serialisation: JSON (readable, small plans) and a compact little-endian
//! binary form (large plans). Both round-trip exactly (`Plan::hash` is over the field values,
//! in `content_hash`).
use super::{Buf, Collective, Op, Plan, Segment, Transfer};
use crate::error::{Error, Result};
use crate::invalid;
use crate::topology::Tier;
use crate::traffic::Traffic;

const MAGIC: &[u8; 8] = b"CSPLAN01";
/// Most ranks a plan may have: the largest cluster (`Cluster::validate`, 2^20 GPUs).
const MAX_RANKS: u64 = 1 << 20;

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
        let mut out = Vec::with_capacity(64 + self.transfers.len() * 30 + self.segments.len() * 26 + self.deps.len() * 4);
        // Fixed-size records are filled in a small buffer, so each field is one store rather
        // than one growth check of `out`.
        let mut w = Writer { out: &mut out, buf: [0; WRITE_BUF], at: 0 };
        w.bytes(MAGIC);
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
            let r = w.record::<30>();
            r[0..4].copy_from_slice(&t.src.to_le_bytes());
            r[4..8].copy_from_slice(&t.dst.to_le_bytes());
            r[8] = t.op as u8;
            r[9] = t.tier as u8;
            r[10..14].copy_from_slice(&t.step.to_le_bytes());
            r[14..18].copy_from_slice(&t.seg_begin.to_le_bytes());
            r[18..22].copy_from_slice(&t.seg_end.to_le_bytes());
            r[22..26].copy_from_slice(&t.dep_begin.to_le_bytes());
            r[26..30].copy_from_slice(&t.dep_end.to_le_bytes());
        }
        w.u64(self.segments.len() as u64);
        for s in &self.segments {
            let r = w.record::<26>();
            r[0] = s.src_buf as u8;
            r[1..9].copy_from_slice(&s.src_off.to_le_bytes());
            r[9] = s.dst_buf as u8;
            r[10..18].copy_from_slice(&s.dst_off.to_le_bytes());
            r[18..26].copy_from_slice(&s.len.to_le_bytes());
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
        w.flush();
        out
    }

    pub fn from_binary(b: &[u8]) -> Result<Plan> {
        let mut r = Reader { b, at: 0 };
        if b.len() < MAGIC.len() || &b[..MAGIC.len()] != MAGIC {
            // Say what the bytes are not, rather than "truncated" for a text file.
            return invalid!(
                "not a collsched plan: a plan file is JSON (starting with '{{') or binary (starting with {:?}), this one starts with {:?}",
                std::str::from_utf8(MAGIC).unwrap(),
                String::from_utf8_lossy(&b[..b.len().min(16)])
            );
        }
        r.take(8)?;
        let algorithm = r.str()?;
        let gpus_per_server = r.u32()?;
        let input_hash = r.u64()?;
        let collective = match r.u8()? {
            0 => {
                let n = r.u64()?;
                // A rank count no cluster can have is a damaged header, not a short file.
                if n == 0 || n > MAX_RANKS {
                    return invalid!("binary plan is corrupted: its rank count field reads {n} (a plan has 1 to {MAX_RANKS} ranks)");
                }
                let left = (b.len() - r.at) / 8;
                if n * n > left as u64 {
                    return invalid!("binary plan is truncated: its {n}×{n} matrix needs {} bytes, {} are left", n * n * 8, b.len() - r.at);
                }
                let entries = (n * n) as usize;
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
        let p = Plan { algorithm, collective, gpus_per_server, scratch_bytes, transfers, segments, deps, input_hash, meta, decisions_digest: 0 };
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

const WRITE_BUF: usize = 8192;

struct Writer<'a> {
    out: &'a mut Vec<u8>,
    buf: [u8; WRITE_BUF],
    at: usize,
}

impl Writer<'_> {
    fn flush(&mut self) {
        self.out.extend_from_slice(&self.buf[..self.at]);
        self.at = 0;
    }
    /// The next `N` bytes of the output, to fill.
    #[inline(always)]
    fn record<const N: usize>(&mut self) -> &mut [u8; N] {
        if self.at + N > WRITE_BUF {
            self.flush();
        }
        let at = self.at;
        self.at += N;
        (&mut self.buf[at..at + N]).try_into().unwrap()
    }
    fn u8(&mut self, v: u8) {
        self.record::<1>()[0] = v;
    }
    fn u32(&mut self, v: u32) {
        *self.record::<4>() = v.to_le_bytes();
    }
    fn u64(&mut self, v: u64) {
        *self.record::<8>() = v.to_le_bytes();
    }
    fn bytes(&mut self, b: &[u8]) {
        self.flush();
        self.out.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes(s.as_bytes());
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
        let left = self.b.len() - self.at;
        if n > (left / item.max(1)) as u64 {
            // A count beyond the whole file's size is a damaged field; one a little short, a cut file.
            let what = if n > self.b.len() as u64 { "corrupted" } else { "truncated" };
            return invalid!("binary plan is {what}: a count field reads {n}, but only {left} bytes are left");
        }
        Ok(n as usize)
    }
    fn str(&mut self) -> Result<String> {
        let n = self.len(1)?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| Error::InvalidInput("binary plan: string is not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use crate::algo::{collective, plan_all_to_all};
    use crate::plan::{Options, Plan};
    use crate::traffic::generators;
    use crate::Cluster;

    fn plans() -> Vec<Plan> {
        let c = Cluster::parse("h200:3").unwrap();
        let t = generators::zipf(24, 0.8, 5 << 20, 3).unwrap();
        let mut v: Vec<Plan> = ["fast", "fanout", "spreadout"].iter().map(|a| plan_all_to_all(&t, &c, a, &Options::new()).unwrap()).collect();
        v.push(collective::plan("allgather", "ring", 24, 1 << 20, 4, Some(&c), &Options::new()).unwrap());
        v.push(collective::plan("allreduce", "ring", 5, 1000, 4, None, &Options::new()).unwrap());
        v
    }

    #[test]
    fn text_is_not_reported_as_a_truncated_plan() {
        for bytes in [&b"hello\n"[..], &b""[..], &b"CSPLAN"[..], &b"{\"not\": 1}"[..]] {
            let e = Plan::from_binary(bytes).unwrap_err().to_string();
            assert!(e.starts_with("not a collsched plan") && !e.contains("truncated"), "{e}");
        }
        let mut b = plans()[1].to_binary();
        b.truncate(b.len() - 3);
        assert!(Plan::from_binary(&b).unwrap_err().to_string().contains("truncated"));
    }

    #[test]
    fn a_damaged_rank_count_is_reported_as_corrupted() {
        let p = &plans()[1];
        let mut b = p.to_binary();
        // The rank count follows the magic, the algorithm name (length + bytes), gpus_per_server,
        // input_hash and the collective kind byte.
        let at = 8 + 8 + p.algorithm.len() + 4 + 8 + 1;
        assert_eq!(u64::from_le_bytes(b[at..at + 8].try_into().unwrap()), 24);
        b[at + 7] = 0x55;
        let e = Plan::from_binary(&b).unwrap_err().to_string();
        assert!(e.starts_with("binary plan is corrupted") && e.contains("rank count"), "{e}");
        assert!(!e.contains("matrix of"), "{e}");
    }

    #[test]
    fn binary_form_round_trips() {
        for (k, p) in plans().into_iter().enumerate() {
            let bytes = p.to_binary();
            assert!(k > 0 || bytes.len() > 4 * super::WRITE_BUF, "the FAST plan spans several write buffers");
            // 8 KiB write buffer: the larger plans cross it many times, mid-record too.
            // The decisions digest is not content: a plan read back has none.
            let want = Plan { decisions_digest: 0, ..p.clone() };
            assert_eq!(Plan::from_binary(&bytes).unwrap(), want, "{}", p.algorithm);
        }
    }
}
