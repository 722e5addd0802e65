//! Print a digest of plans that ignores how segments are cut (adjacent segments that are
//! contiguous in source and destination are merged first), to check that a
//! performance change keeps every plan: `cargo run --release --example plan_digest`.
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::{Options, Segment};
use collsched_core::traffic::generators;
use collsched_core::Cluster;

fn fold(h: &mut u64, v: u64) {
    for b in v.to_le_bytes() {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100000001b3);
    }
}

fn main() {
    for spec in ["h200:2", "h200:4,nics=2", "h200:8", "h200:5,nics=4", "h200:40", "mi300x:3", "h200:16,nics=2", "h200:64"] {
        let c = match Cluster::parse(spec) {
            Ok(c) => c,
            Err(e) => {
                println!("{spec}: {e}");
                continue;
            }
        };
        let p = c.num_gpus() as usize;
        for seed in 0..4u64 {
            let t = if seed == 3 { generators::zipf(p, 0.99, 1 << 20, seed).unwrap() } else if seed == 2 { generators::uniform(p, 1 << 20, seed).unwrap() } else { generators::zipf(p, 0.8, 50 << 20, seed).unwrap() };
            for algo in ["fast", "balanced_direct", "fanout"] {
                let mut opts = Options::new();
                if seed == 1 && algo == "fast" {
                    opts.insert("order".into(), "asc".into());
                }
                let plan = plan_all_to_all(&t, &c, algo, &opts).unwrap();
                let mut h = 0xcbf29ce484222325u64;
                for x in &plan.scratch_bytes {
                    fold(&mut h, *x);
                }
                for tr in &plan.transfers {
                    for v in [tr.src, tr.dst, tr.op as u32, tr.tier as u32, tr.step] {
                        fold(&mut h, v as u64);
                    }
                    for d in plan.deps_of(tr) {
                        fold(&mut h, *d as u64);
                    }
                    let mut merged: Vec<Segment> = Vec::new();
                    for s in plan.segments_of(tr) {
                        if let Some(l) = merged.last_mut() {
                            if l.src_buf == s.src_buf && l.dst_buf == s.dst_buf && l.src_off + l.len == s.src_off && l.dst_off + l.len == s.dst_off {
                                l.len += s.len;
                                continue;
                            }
                        }
                        merged.push(*s);
                    }
                    fold(&mut h, 0xffff);
                    for s in merged {
                        for v in [s.src_buf as u64, s.src_off, s.dst_buf as u64, s.dst_off, s.len] {
                            fold(&mut h, v);
                        }
                    }
                }
                let meta: Vec<String> = plan.meta.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("{spec} seed{seed} {algo}: {:016x} exact {:016x} transfers {} segments {} {}", h, plan.hash(), plan.transfers.len(), plan.segments.len(), meta.join(","));
            }
        }
    }
}
