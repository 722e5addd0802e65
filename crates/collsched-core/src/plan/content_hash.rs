//! `Plan::hash`: the value ranks compare before moving data. It is defined over the plan's
//! field values (packed into words, so it is the same on every platform), not over its
//! binary form: encoding every record byte by byte first cost more than the hashing. In two
//! independent halves (once hashed on two threads; the value stays as it was defined).
use super::hash::Fnv64;
use super::{Collective, Plan};

impl Plan {
    /// Content hash: equal on every rank that planned the same thing, and (up to 64-bit
    /// collisions) different when any field differs.
    pub fn hash(&self) -> u64 {
        let (tail, head) = (self.hash_tail(), self.hash_head());
        let mut h = Fnv64::new();
        h.write_u64(head);
        h.write_u64(tail);
        h.finish()
    }

    /// Producer, collective (with the matrix), scratch sizes and transfers.
    fn hash_head(&self) -> u64 {
        let mut h = Fnv64::new();
        h.write(self.algorithm.as_bytes());
        h.write_u64(u64::from(self.gpus_per_server));
        h.write_u64(self.input_hash);
        match &self.collective {
            Collective::AllToAll { traffic } => {
                h.write_u64(0);
                h.write_u64s(traffic.data());
            }
            Collective::AllGather { ranks, shard_bytes } => {
                h.write_u64s(&[1, u64::from(*ranks), *shard_bytes]);
            }
            Collective::ReduceScatter { ranks, shard_bytes, elem_bytes } => {
                h.write_u64s(&[2, u64::from(*ranks), *shard_bytes, u64::from(*elem_bytes)]);
            }
            Collective::AllReduce { ranks, bytes, elem_bytes } => {
                h.write_u64s(&[3, u64::from(*ranks), *bytes, u64::from(*elem_bytes)]);
            }
        }
        h.write_u64s(&self.scratch_bytes);
        let pair = |a: u32, b: u32| u64::from(a) | u64::from(b) << 32;
        for t in &self.transfers {
            h.write4([pair(t.src, t.dst), (t.op as u64) | (t.tier as u64) << 8 | u64::from(t.step) << 32, pair(t.seg_begin, t.seg_end), pair(t.dep_begin, t.dep_end)]);
        }
        h.write_u64(self.transfers.len() as u64);
        h.finish()
    }

    /// Segments, dependencies and meta.
    fn hash_tail(&self) -> u64 {
        let mut h = Fnv64::new();
        for s in &self.segments {
            h.write4([(s.src_buf as u64) | (s.dst_buf as u64) << 8, s.src_off, s.dst_off, s.len]);
        }
        h.write_u64(self.segments.len() as u64);
        let mut deps = self.deps.chunks_exact(8);
        for c in &mut deps {
            let w = |k: usize| u64::from(c[2 * k]) | u64::from(c[2 * k + 1]) << 32;
            h.write4([w(0), w(1), w(2), w(3)]);
        }
        let rest: Vec<u64> = deps.remainder().iter().map(|&d| u64::from(d)).collect();
        h.write_u64s(&rest);
        h.write_u64(self.deps.len() as u64);
        for (k, v) in &self.meta {
            h.write(k.as_bytes());
            h.write(v.as_bytes());
        }
        h.write_u64(self.meta.len() as u64);
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::algo::{collective, plan_all_to_all};
    use crate::plan::{Buf, Op, Options, Plan};
    use crate::topology::Tier;
    use crate::traffic::generators;
    use crate::Cluster;

    fn plans() -> Vec<Plan> {
        let c = Cluster::parse("h200:3").unwrap();
        let t = generators::zipf(24, 0.8, 5 << 20, 3).unwrap();
        let mut v: Vec<Plan> = ["fast", "fanout"].iter().map(|a| plan_all_to_all(&t, &c, a, &Options::new()).unwrap()).collect();
        v.push(collective::plan("allgather", "ring", 24, 1 << 20, 4, Some(&c), &Options::new()).unwrap());
        v.push(collective::plan("allreduce", "ring", 5, 1000, 4, None, &Options::new()).unwrap());
        v
    }

    #[test]
    fn equal_plans_hash_alike_and_every_field_counts() {
        for p in plans() {
            let h = p.hash();
            assert_eq!(h, p.clone().hash());
            assert_eq!(h, Plan::from_binary(&p.to_binary()).unwrap().hash());
            let mut changed: Vec<Plan> = Vec::new();
            let mut edit = |f: &dyn Fn(&mut Plan)| {
                let mut q = p.clone();
                f(&mut q);
                changed.push(q);
            };
            edit(&|q| q.algorithm.push('x'));
            edit(&|q| q.gpus_per_server += 1);
            edit(&|q| q.input_hash ^= 1);
            edit(&|q| q.scratch_bytes[0] += 1);
            edit(&|q| q.meta.insert("k".into(), "v".into()).map_or((), |_| ()));
            let last = p.transfers.len() - 1;
            edit(&|q| q.transfers[last].src ^= 1);
            edit(&|q| q.transfers[0].dst ^= 1);
            edit(&|q| q.transfers[0].op = if q.transfers[0].op == Op::Copy { Op::ReduceSum } else { Op::Copy });
            edit(&|q| q.transfers[0].tier = if q.transfers[0].tier == Tier::ScaleOut { Tier::ScaleUp } else { Tier::ScaleOut });
            edit(&|q| q.transfers[0].step += 1);
            edit(&|q| q.transfers[0].seg_end += 1);
            edit(&|q| q.transfers[0].dep_end += 1);
            edit(&|q| q.transfers.swap(0, last));
            let s = p.segments.len() - 1;
            edit(&|q| q.segments[s].len += 1);
            edit(&|q| q.segments[0].src_off += 1);
            edit(&|q| q.segments[0].dst_off += 1);
            edit(&|q| q.segments[0].src_buf = if q.segments[0].src_buf == Buf::Input { Buf::Scratch } else { Buf::Input });
            edit(&|q| q.segments[0].dst_buf = if q.segments[0].dst_buf == Buf::Output { Buf::Scratch } else { Buf::Output });
            edit(&|q| q.deps.push(0));
            if !p.deps.is_empty() {
                let d = p.deps.len() - 1;
                edit(&|q| q.deps[d] ^= 1);
            }
            if let crate::plan::Collective::AllToAll { traffic } = &p.collective {
                let mut data = traffic.data().to_vec();
                data[1] += 1;
                let t = crate::traffic::Traffic::new(traffic.n(), data).unwrap();
                edit(&|q| q.collective = crate::plan::Collective::AllToAll { traffic: t.clone() });
            }
            for (k, q) in changed.iter().enumerate() {
                assert_ne!(q.hash(), h, "{}: edit {k} left the hash unchanged", p.algorithm);
            }
        }
    }
}
