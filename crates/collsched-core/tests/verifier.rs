//! The verifier accepts correct plans and rejects each kind of mistake with a
//! message naming the transfer (or, for a final-state error, the rank and block).
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::verify::{verify, verify_with, FinalState};
use collsched_core::plan::Options;
use collsched_core::{Buf, Cluster, Collective, Op, Plan, PlanBuilder, Segment, Tier, Traffic};
use proptest::prelude::*;

/// 2 servers × 4 GPUs, every pair non-empty and of a different size.
fn cluster() -> Cluster {
    Cluster::parse("h200:2,gpus=4").unwrap()
}

fn traffic() -> Traffic<'static> {
    let n = 8;
    let data = (0..n * n).map(|k| (((k * 7 + 3) % 5) as u64 + 1) * 16).collect();
    Traffic::new(n, data).unwrap()
}

fn planned(algorithm: &str) -> Plan {
    plan_all_to_all(&traffic(), &cluster(), algorithm, &Options::new()).unwrap()
}

fn rejected(plan: &Plan) -> String {
    match verify(plan) {
        Ok(_) => panic!("verifier accepted a broken plan"),
        Err(collsched_core::Error::Verification(m)) => m,
        Err(e) => panic!("expected a verification error, got {e:?}"),
    }
}

fn assert_names(msg: &str, transfer: u32, what: &str) {
    assert!(msg.starts_with(&format!("transfer {transfer} (")), "message should name transfer {transfer}: {msg}");
    assert!(msg.contains(what), "message should say '{what}': {msg}");
}

/// The plan without transfer `drop`, deps renumbered (deps on it are removed).
fn without(plan: &Plan, drop: u32) -> Plan {
    let mut b = PlanBuilder::new(&plan.algorithm, plan.collective.clone(), plan.gpus_per_server);
    for (r, &s) in plan.scratch_bytes.iter().enumerate() {
        b.need_scratch(r as u32, s);
    }
    for (id, t) in plan.transfers.iter().enumerate() {
        if id as u32 == drop {
            continue;
        }
        let deps: Vec<u32> = plan.deps_of(t).iter().filter(|&&d| d != drop).map(|&d| if d > drop { d - 1 } else { d }).collect();
        b.transfer(t.src, t.dst, t.op, t.tier, t.step, plan.segments_of(t), &deps);
    }
    b.finish()
}

/// Append one transfer at the end of a plan.
#[allow(clippy::too_many_arguments)]
fn with_extra(plan: &Plan, src: u32, dst: u32, op: Op, tier: Tier, step: u32, segs: &[Segment], deps: &[u32]) -> Plan {
    let mut p = plan.clone();
    let seg_begin = p.segments.len() as u32;
    p.segments.extend_from_slice(segs);
    let dep_begin = p.deps.len() as u32;
    p.deps.extend_from_slice(deps);
    p.transfers.push(collsched_core::Transfer {
        src,
        dst,
        op,
        tier,
        step,
        seg_begin,
        seg_end: p.segments.len() as u32,
        dep_begin,
        dep_end: p.deps.len() as u32,
    });
    p
}

/// First transfer of the plan matching `f`.
fn find(plan: &Plan, f: impl Fn(&collsched_core::Transfer) -> bool) -> u32 {
    plan.transfers.iter().position(f).expect("plan has such a transfer") as u32
}

#[test]
fn baselines_verify() {
    for algo in ["fanout", "spreadout", "hierarchical"] {
        let p = planned(algo);
        let r = verify(&p).unwrap_or_else(|e| panic!("{algo}: {e}"));
        assert_eq!(r.transfers, p.transfers.len());
        assert_eq!(r.bytes_moved, p.bytes_per_tier().iter().sum::<u128>());
        if algo == "hierarchical" {
            // Step-1 messages read scratch written in step 0: obligations were proven.
            assert!(r.conflicts > 0);
        }
    }
}

#[test]
fn dropped_transfer_leaves_output_unwritten() {
    let p = planned("fanout");
    let t = p.transfers[5];
    let msg = rejected(&without(&p, 5));
    assert!(msg.contains(&format!("output of rank {}", t.dst)) && msg.contains("never written"), "{msg}");
    assert!(msg.contains(&format!("block {}→{}", t.src, t.dst)), "{msg}");
}

#[test]
fn duplicated_segment_overlaps_its_twin() {
    let p = planned("hierarchical");
    // A scale-out message with several segments; repeat its first segment.
    let id = find(&p, |t| t.tier == Tier::ScaleOut && t.seg_end - t.seg_begin > 1);
    let t = p.transfers[id as usize];
    let mut q = p.clone();
    let first = q.segments[t.seg_begin as usize];
    q.segments.insert(t.seg_end as usize, first);
    for x in q.transfers.iter_mut().skip(id as usize) {
        if x.seg_begin >= t.seg_end && x.seg_begin != t.seg_begin {
            x.seg_begin += 1;
        }
        x.seg_end += 1;
    }
    q.transfers[id as usize].seg_begin = t.seg_begin;
    assert_names(&rejected(&q), id, "overlaps the destination of segment 0");
}

#[test]
fn wrong_destination_offset_hits_a_written_block() {
    let p = planned("fanout");
    // The last writer into rank 0's output is the transfer from rank 7; point it at block 0→0.
    let id = find(&p, |t| t.src == 7 && t.dst == 0);
    let mut q = p.clone();
    q.segments[p.transfers[id as usize].seg_begin as usize].dst_off = 0;
    let msg = rejected(&q);
    assert_names(&msg, id, "already written by transfer 0");
}

#[test]
fn shifted_self_block_collides_with_its_neighbour() {
    // Rank 7's self block (the last block of its output) moved 16 bytes down onto block 6→7.
    let mut p = planned("fanout");
    let id = find(&p, |t| t.src == 7 && t.dst == 7);
    let seg = p.transfers[id as usize].seg_begin as usize;
    p.segments[seg].dst_off -= 16;
    let msg = rejected(&p);
    assert_names(&msg, id, "already written");
}

#[test]
fn wrong_source_rank_delivers_the_wrong_bytes() {
    // Balanced traffic so every input has the same size and the segment stays in bounds.
    let t = Traffic::new(8, vec![32; 64]).unwrap();
    let mut p = plan_all_to_all(&t, &cluster(), "fanout", &Options::new()).unwrap();
    let id = find(&p, |t| t.src == 1 && t.dst == 2);
    p.transfers[id as usize].src = 3; // still scale-up
    let msg = rejected(&p);
    assert!(msg.contains("output of rank 2") && msg.contains("block 1→2"), "{msg}");
    assert!(msg.contains("expected rank 1's input") && msg.contains("found rank 3's input"), "{msg}");
    assert!(msg.contains(&format!("written by transfer {id} (rank 3→2")), "{msg}");
}

#[test]
fn reading_scratch_before_it_is_written() {
    let p = planned("hierarchical");
    let gather = find(&p, |t| t.tier == Tier::ScaleUp);
    let q = without(&p, gather);
    let msg = rejected(&q);
    assert!(msg.contains("reads bytes of scratch[") && msg.contains("never written"), "{msg}");
    assert!(msg.starts_with("transfer ") && msg.contains("scale_out, step 1), segment"), "{msg}");
}

#[test]
fn missing_dependency() {
    let mut p = planned("hierarchical");
    let id = find(&p, |t| t.tier == Tier::ScaleOut && t.dep_end > t.dep_begin);
    p.transfers[id as usize].dep_end = p.transfers[id as usize].dep_begin;
    assert_names(&rejected(&p), id, "which is not an ancestor through deps");
}

#[test]
fn dependency_in_the_same_step() {
    let mut p = planned("hierarchical");
    let id = find(&p, |t| t.tier == Tier::ScaleOut && t.dep_end > t.dep_begin);
    p.transfers[id as usize].step = 0;
    assert_names(&rejected(&p), id, "which runs in step 0, not before step 0");
}

#[test]
fn dependency_on_a_later_step_or_transfer() {
    let mut p = planned("hierarchical");
    let id = find(&p, |t| t.tier == Tier::ScaleOut && t.dep_end > t.dep_begin);
    let dep = p.deps[p.transfers[id as usize].dep_begin as usize];
    p.transfers[dep as usize].step = 3;
    assert_names(&rejected(&p), id, "whose step 3 is after its own step 1");
    let mut p = planned("fanout");
    p.deps.push(4);
    p.transfers[2].dep_end = p.deps.len() as u32;
    p.transfers[2].dep_begin = p.deps.len() as u32 - 1;
    assert_names(&rejected(&p), 2, "depends on transfer 4, which does not come earlier");
}

#[test]
fn overwriting_live_scratch() {
    let p = planned("hierarchical");
    // A step-1 message reads scratch of its sender; a step-2 local copy then overwrites
    // those bytes. It waits for the gather that wrote them but not for the reader.
    let reader = find(&p, |t| t.tier == Tier::ScaleOut && t.dep_end > t.dep_begin);
    let r = p.transfers[reader as usize];
    let seg = *p.segments_of(&r).iter().find(|s| s.src_buf == Buf::Scratch).unwrap();
    let writer = p.deps_of(&r)[0];
    let over = Segment { src_buf: Buf::Input, src_off: 0, dst_buf: Buf::Scratch, dst_off: seg.src_off, len: seg.len.min(16) };
    let q = with_extra(&p, r.src, r.src, Op::Copy, Tier::Local, 2, &[over], &[writer]);
    let id = q.transfers.len() as u32 - 1;
    let msg = rejected(&q);
    assert_names(&msg, id, &format!("while transfer {reader} "));
    assert!(msg.contains("still reads it, which is not an ancestor through deps"), "{msg}");
    // Waiting for the reader (and the writer) makes it legal.
    let ok = with_extra(&p, r.src, r.src, Op::Copy, Tier::Local, 2, &[over], &[writer, reader]);
    verify(&ok).unwrap();
    // Same deps but in the reader's own step: the step order is violated.
    let same_step = with_extra(&p, r.src, r.src, Op::Copy, Tier::Local, 1, &[over], &[writer, reader]);
    assert_names(&rejected(&same_step), id, "which runs in step 1, not before step 1");
}

#[test]
fn out_of_bounds_segment() {
    let mut p = planned("fanout");
    let out = p.collective.output_size(p.transfers[3].dst);
    let seg = p.transfers[3].seg_begin as usize;
    p.segments[seg].dst_off = out - 8;
    assert_names(&rejected(&p), 3, "lies outside the buffer");
    let mut p = planned("fanout");
    p.segments[seg].src_off = u64::MAX - 4;
    assert_names(&rejected(&p), 3, "overflows");
    let mut p = planned("fanout");
    p.segments[seg].src_buf = Buf::Scratch; // no scratch in a fanout plan
    assert_names(&rejected(&p), 3, "source scratch[");
}

#[test]
fn writing_into_input() {
    let mut p = planned("fanout");
    let seg = p.transfers[6].seg_begin as usize;
    p.segments[seg].dst_buf = Buf::Input;
    assert_names(&rejected(&p), 6, "inputs are read-only");
}

#[test]
fn wrong_tier() {
    let mut p = planned("fanout");
    let id = find(&p, |t| t.tier == Tier::ScaleOut);
    p.transfers[id as usize].tier = Tier::ScaleUp;
    assert_names(&rejected(&p), id, "tier is scale_up but rank");
    let mut p = planned("fanout");
    let id = find(&p, |t| t.tier == Tier::Local);
    p.transfers[id as usize].tier = Tier::ScaleUp;
    assert_names(&rejected(&p), id, "is local");
    let mut p = planned("fanout");
    p.gpus_per_server = 0; // an all-to-all is always planned for a cluster: a malformed header (issue 35)
    assert!(verify(&p).unwrap_err().to_string().contains("malformed plan: gpus_per_server is 0"));
}

#[test]
fn output_written_twice() {
    let p = planned("fanout");
    let t = p.transfers[9];
    let q = with_extra(&p, t.src, t.dst, Op::Copy, t.tier, 1, p.segments_of(&t), &[9]);
    let id = q.transfers.len() as u32 - 1;
    assert_names(&rejected(&q), id, "already written by transfer 9");
}

#[test]
fn reduce_sum_in_a_copy_collective() {
    let mut p = planned("fanout");
    p.transfers[4].op = Op::ReduceSum;
    assert_names(&rejected(&p), 4, "reduce_sum in a all_to_all plan");
}

#[test]
fn local_copy_must_not_read_what_it_writes() {
    // Scratch 0..32 on rank 0: fill it, then copy 0..16 onto 8..24 in one local transfer.
    let c = Collective::AllGather { ranks: 1, shard_bytes: 32 };
    let mut b = PlanBuilder::new("hand", c, 1);
    b.need_scratch(0, 32);
    let fill = Segment { src_buf: Buf::Input, src_off: 0, dst_buf: Buf::Scratch, dst_off: 0, len: 32 };
    let t0 = b.transfer(0, 0, Op::Copy, Tier::Local, 0, &[fill], &[]);
    let shift = Segment { src_buf: Buf::Scratch, src_off: 0, dst_buf: Buf::Scratch, dst_off: 8, len: 16 };
    b.transfer(0, 0, Op::Copy, Tier::Local, 1, &[shift], &[t0]);
    assert_names(&rejected(&b.finish()), 1, "overlaps the destination of segment 0");
}

/// A correct AllReduce on 2 ranks of 16 bytes (4-byte elements): each rank copies its
/// input to its output, rank 0 adds into rank 1, rank 1 sends the sum back.
fn allreduce_plan(final_op: Op, reduce_len: u64) -> Plan {
    let c = Collective::AllReduce { ranks: 2, bytes: 16, elem_bytes: 4 };
    let mut b = PlanBuilder::new("hand", c, 2);
    let whole = |src_buf, dst_buf, len| Segment { src_buf, src_off: 0, dst_buf, dst_off: 0, len };
    let t0 = b.transfer(0, 0, Op::Copy, Tier::Local, 0, &[whole(Buf::Input, Buf::Output, 16)], &[]);
    let t1 = b.transfer(1, 1, Op::Copy, Tier::Local, 0, &[whole(Buf::Input, Buf::Output, 16)], &[]);
    let t2 = b.transfer(0, 1, Op::ReduceSum, Tier::ScaleUp, 1, &[whole(Buf::Input, Buf::Output, reduce_len)], &[t1]);
    b.transfer(1, 0, final_op, Tier::ScaleUp, 2, &[whole(Buf::Output, Buf::Output, 16)], &[t2, t0]);
    b.finish()
}

#[test]
fn allreduce_by_hand() {
    verify(&allreduce_plan(Op::Copy, 16)).unwrap();
    // Only half the elements reduced: the final state shows the missing rank.
    let msg = rejected(&allreduce_plan(Op::Copy, 8));
    assert!(msg.contains("final state: output of rank 0 bytes [0x8..0x10)") && msg.contains("expected the sum over all 2 ranks"), "{msg}");
}

#[test]
fn reduce_double_count() {
    let msg = rejected(&allreduce_plan(Op::ReduceSum, 16));
    assert_names(&msg, 3, "rank 0 would be counted twice");
}

#[test]
fn reduce_misaligned() {
    let msg = rejected(&allreduce_plan(Op::Copy, 6));
    assert_names(&msg, 2, "not aligned to the 4-byte element");
}

#[test]
fn reduce_into_unwritten_bytes() {
    // Without rank 1's own copy there is nothing to add into.
    let p = without(&allreduce_plan(Op::Copy, 16), 1);
    assert_names(&rejected(&p), 1, "never written (reduce_sum needs an initialised destination)");
}

/// An MoE-combine-like plan whose final state no collective states: rank 1's output row
/// (8 bytes, 4-byte elements) sums a row of rank 0's input and two rows of its own, each at
/// another input offset. Declared as an all-to-all for the buffer sizes only.
fn custom_sum_plan(last_step: u32, last_deps: &[u32], last_len: u64) -> Plan {
    let traffic = Traffic::new(2, vec![16, 16, 16, 16]).unwrap();
    let mut b = PlanBuilder::new("hand", Collective::AllToAll { traffic }, 1);
    let seg = |src_off, len| Segment { src_buf: Buf::Input, src_off, dst_buf: Buf::Output, dst_off: 0, len };
    let t0 = b.transfer(0, 1, Op::Copy, Tier::ScaleOut, 0, &[seg(0, 8)], &[]);
    let t1 = b.transfer(1, 1, Op::ReduceSum, Tier::Local, 1, &[seg(8, 8)], &[t0]);
    let deps: Vec<u32> = last_deps.iter().map(|&d| [t0, t1][d as usize]).collect();
    b.transfer(1, 1, Op::ReduceSum, Tier::Local, last_step, &[seg(24, last_len)], &deps);
    b.finish()
}

#[test]
fn caller_final_state_allows_any_sum_but_still_proves_the_order() {
    let caller = FinalState::Caller { elem_bytes: 4 };
    let ok = custom_sum_plan(2, &[1], 8);
    // The collective's rules refuse reduce_sum in an all-to-all plan; left to the caller, it passes.
    assert_names(&rejected(&ok), 1, "reduce_sum in a all_to_all plan");
    let r = verify_with(&ok, caller).unwrap();
    assert_eq!((r.transfers, r.bytes_moved, r.steps), (3, 24, 3));
    let err = |p: &Plan| verify_with(p, caller).unwrap_err().to_string();
    // Two sums into the same bytes in one step, or not ordered by deps: a hazard either way.
    assert_names(&err(&custom_sum_plan(1, &[0], 8)), 2, "not before step 1");
    assert_names(&err(&custom_sum_plan(2, &[0], 8)), 2, "not an ancestor through deps");
    assert_names(&err(&custom_sum_plan(2, &[1], 6)), 2, "not aligned to the 4-byte element");
    // Adding into bytes nobody wrote, and copying twice onto an output byte, stay errors.
    assert_names(&err(&without(&ok, 0)), 0, "never written (reduce_sum needs an initialised destination)");
    let twice = with_extra(&ok, 0, 1, Op::Copy, Tier::ScaleOut, 3, &[Segment { src_buf: Buf::Input, src_off: 0, dst_buf: Buf::Output, dst_off: 0, len: 8 }], &[2]);
    assert_names(&err(&twice), 3, "already written by transfer 2");
    // The default keeps checking the final state: a plan leaving outputs unwritten fails only there.
    let partial = planned("fanout");
    let dropped = without(&partial, 0);
    assert!(rejected(&dropped).starts_with("final state:"));
    verify_with(&dropped, caller).unwrap();
}

#[test]
fn reduce_scatter_by_hand() {
    // 2 ranks, shard 8 bytes, 4-byte elements: each rank keeps its shard and adds the peer's.
    let build = |peer_off: u64| {
        let c = Collective::ReduceScatter { ranks: 2, shard_bytes: 8, elem_bytes: 4 };
        let mut b = PlanBuilder::new("hand", c, 1);
        let seg = |src_off| Segment { src_buf: Buf::Input, src_off, dst_buf: Buf::Output, dst_off: 0, len: 8 };
        let t0 = b.transfer(0, 0, Op::Copy, Tier::Local, 0, &[seg(0)], &[]);
        let t1 = b.transfer(1, 1, Op::Copy, Tier::Local, 0, &[seg(8)], &[]);
        b.transfer(1, 0, Op::ReduceSum, Tier::ScaleOut, 1, &[seg(peer_off)], &[t0]);
        b.transfer(0, 1, Op::ReduceSum, Tier::ScaleOut, 1, &[seg(8)], &[t1]);
        b.finish()
    };
    verify(&build(0)).unwrap();
    // Rank 1 sends the wrong shard: its offsets do not match what rank 0 holds.
    assert_names(&rejected(&build(8)), 2, "the input offsets differ");
}

#[test]
fn allgather_by_hand() {
    // 3 ranks, shard 8: every rank copies its own shard, then sends it to both others.
    let build = |bad: bool| {
        let c = Collective::AllGather { ranks: 3, shard_bytes: 8 };
        let mut b = PlanBuilder::new("hand", c, 3);
        for r in 0..3u32 {
            let seg = Segment { src_buf: Buf::Input, src_off: 0, dst_buf: Buf::Output, dst_off: r as u64 * 8, len: 8 };
            b.transfer(r, r, Op::Copy, Tier::Local, 0, &[seg], &[]);
        }
        for r in 0..3u32 {
            for d in (0..3u32).filter(|&d| d != r) {
                // Forward from the own output copy: a read after the local write.
                let src_off = if bad && r == 0 && d == 1 { 8 } else { r as u64 * 8 };
                let seg = Segment { src_buf: Buf::Output, src_off, dst_buf: Buf::Output, dst_off: r as u64 * 8, len: 8 };
                b.transfer(r, d, Op::Copy, Tier::ScaleUp, 1, &[seg], &[r]);
            }
        }
        b.finish()
    };
    verify(&build(false)).unwrap();
    // Rank 0 forwards rank 1's slot before rank 1's shard arrived (in id order).
    assert_names(&rejected(&build(true)), 3, "reads bytes of output[0x8..0x10) on rank 0 never written");
}

#[test]
fn malformed_plans_are_verification_errors() {
    let mut p = planned("fanout");
    p.transfers[0].seg_end = p.segments.len() as u32 + 5;
    assert!(rejected(&p).starts_with("malformed plan: transfer 0"));
}

/// A value for a mutated field: small, near a real value, or extreme.
fn pick(choice: u8, near: u64) -> u64 {
    match choice % 6 {
        0 => 0,
        1 => near.wrapping_add(1),
        2 => near.saturating_sub(1),
        3 => near.wrapping_add(16),
        4 => u64::MAX - 3,
        _ => u32::MAX as u64,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// Any single-field corruption of a plan gives Ok or a Verification error, never a panic.
    #[test]
    fn random_corruption_never_panics(algo in 0usize..3, field in 0u8..16, index in any::<u32>(), choice in any::<u8>()) {
        let mut p = planned(["fanout", "spreadout", "hierarchical"][algo]);
        let t = index as usize % p.transfers.len();
        let s = index as usize % p.segments.len();
        let v = |near: u64| pick(choice, near);
        let x = &mut p.transfers[t];
        match field {
            0 => x.src = v(x.src as u64) as u32,
            1 => x.dst = v(x.dst as u64) as u32,
            2 => x.op = if choice % 2 == 0 { Op::ReduceSum } else { Op::Copy },
            3 => x.tier = [Tier::Local, Tier::ScaleUp, Tier::ScaleOut][choice as usize % 3],
            4 => x.step = v(x.step as u64) as u32,
            5 => x.seg_begin = v(x.seg_begin as u64) as u32,
            6 => x.seg_end = v(x.seg_end as u64) as u32,
            7 => x.dep_begin = v(x.dep_begin as u64) as u32,
            8 => x.dep_end = v(x.dep_end as u64) as u32,
            9 => p.segments[s].src_off = v(p.segments[s].src_off),
            10 => p.segments[s].dst_off = v(p.segments[s].dst_off),
            11 => p.segments[s].len = v(p.segments[s].len),
            12 => p.segments[s].src_buf = [Buf::Input, Buf::Output, Buf::Scratch][choice as usize % 3],
            13 => p.segments[s].dst_buf = [Buf::Input, Buf::Output, Buf::Scratch][choice as usize % 3],
            14 => {
                let r = index as usize % p.scratch_bytes.len();
                p.scratch_bytes[r] = v(p.scratch_bytes[r]);
            }
            _ => {
                if !p.deps.is_empty() {
                    let d = index as usize % p.deps.len();
                    p.deps[d] = v(p.deps[d] as u64) as u32;
                } else {
                    p.gpus_per_server = v(p.gpus_per_server as u64) as u32;
                }
            }
        }
        match verify(&p) {
            Ok(_) | Err(collsched_core::Error::Verification(_)) => {}
            Err(e) => prop_assert!(false, "unexpected error kind: {e:?}"),
        }
        // The simulator checks what it needs itself: an error or a report, never a panic.
        let _ = collsched_core::sim::simulate(&p, &cluster(), &collsched_core::sim::SimOptions::default());
    }
}

/// A step number in the billions (a corrupt or hand-edited plan) is a clear error for the
/// verifier, the simulator and loading, not an overflow or a huge allocation.
#[test]
fn huge_step_numbers_are_rejected_everywhere() {
    for step in [collsched_core::plan::MAX_STEPS, 1 << 31, u32::MAX] {
        let mut p = planned("fanout");
        p.transfers[3].step = step;
        assert_eq!(p.num_steps(), step.saturating_add(1));
        let want = format!("transfer 3: step {step} is beyond the 1048576 steps a plan may have");
        assert!(rejected(&p).contains(&want), "{}", rejected(&p));
        let sim = collsched_core::sim::simulate(&p, &cluster(), &collsched_core::sim::SimOptions::default()).unwrap_err();
        assert!(sim.to_string().contains(&want), "{sim}");
        let json = p.to_json();
        assert!(Plan::from_json(&json).unwrap_err().to_string().contains(&want));
    }
}

/// Ring reduce-scatter (then, for allreduce, ring allgather) built by hand: chunk c starts
/// at rank c+1 and is reduced hop by hop until it reaches rank c, accumulating in scratch.
/// `skip` drops the ring transfer of that index (to check the verifier notices).
fn ring_plan(ranks: u32, shard: u64, elem: u32, allreduce: bool, skip: Option<usize>) -> Plan {
    let p = ranks;
    let c = if allreduce {
        Collective::AllReduce { ranks, bytes: p as u64 * shard, elem_bytes: elem }
    } else {
        Collective::ReduceScatter { ranks, shard_bytes: shard, elem_bytes: elem }
    };
    let mut b = PlanBuilder::new("ring", c, 4);
    let tier = |a: u32, d: u32| if a == d { Tier::Local } else if a / 4 == d / 4 { Tier::ScaleUp } else { Tier::ScaleOut };
    let seg = |src_buf, src_off, dst_buf, dst_off| Segment { src_buf, src_off, dst_buf, dst_off, len: shard };
    let mut init = Vec::new();
    for r in 0..p {
        b.need_scratch(r, p as u64 * shard);
        let whole = Segment { src_buf: Buf::Input, src_off: 0, dst_buf: Buf::Scratch, dst_off: 0, len: p as u64 * shard };
        init.push(b.transfer(r, r, Op::Copy, Tier::Local, 0, &[whole], &[]));
    }
    // prev[r]: the transfer that last reduced into rank r's scratch.
    let mut prev: Vec<Option<u32>> = vec![None; p as usize];
    let mut count = 0;
    for k in 0..p.saturating_sub(1) {
        let mut next = prev.clone();
        for r in 0..p {
            let (to, chunk) = ((r + 1) % p, (r + 2 * p - 1 - k) % p);
            let deps: Vec<u32> = prev[r as usize].into_iter().chain([init[r as usize], init[to as usize]]).chain(prev[to as usize]).collect();
            let off = chunk as u64 * shard;
            if skip != Some(count) {
                next[to as usize] = Some(b.transfer(r, to, Op::ReduceSum, tier(r, to), k + 1, &[seg(Buf::Scratch, off, Buf::Scratch, off)], &deps));
            }
            count += 1;
        }
        prev = next;
    }
    // Reduced chunk r sits in rank r's scratch.
    let mut done = Vec::new();
    for r in 0..p {
        let off = r as u64 * shard;
        let dst_off = if allreduce { off } else { 0 };
        let deps: Vec<u32> = prev[r as usize].into_iter().chain([init[r as usize]]).collect();
        done.push(b.transfer(r, r, Op::Copy, Tier::Local, p, &[seg(Buf::Scratch, off, Buf::Output, dst_off)], &deps));
    }
    if allreduce {
        // Ring allgather of the reduced chunks through the outputs.
        let mut last = done.clone();
        for k in 0..p.saturating_sub(1) {
            let mut next = last.clone();
            for r in 0..p {
                let (to, chunk) = ((r + 1) % p, (r + p - k) % p);
                let off = chunk as u64 * shard;
                next[to as usize] = b.transfer(r, to, Op::Copy, tier(r, to), p + 1 + k, &[seg(Buf::Output, off, Buf::Output, off)], &[last[r as usize], last[to as usize]]);
            }
            last = next;
        }
    }
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Ring reductions on up to 130 ranks (multi-word rank sets) verify; dropping any one
    /// reduction step is caught.
    #[test]
    fn ring_reductions_verify(ranks in 1u32..=130, elems in 1u64..4, elem_pick in 0usize..4, allreduce in any::<bool>(), skip in any::<u32>()) {
        let elem = [1u32, 2, 4, 8][elem_pick];
        let shard = elems * elem as u64;
        let p = ring_plan(ranks, shard, elem, allreduce, None);
        let report = verify(&p).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(report.conflicts > 0);
        if ranks > 1 {
            let ring_transfers = (ranks * (ranks - 1)) as usize;
            let broken = ring_plan(ranks, shard, elem, allreduce, Some(skip as usize % ring_transfers));
            let msg = rejected(&broken);
            // The missing contribution shows in the final sums.
            prop_assert!(msg.starts_with("final state: output of rank"), "{}", msg);
            let expected = format!("expected the sum over all {ranks} ranks' inputs");
            prop_assert!(msg.contains(&expected), "{}", msg);
            prop_assert!(msg.contains("found the sum of ranks {") || msg.contains("found rank "), "{}", msg);
        }
    }
}

#[test]
fn ring_reduce_scatter_with_a_wrong_chunk_is_rejected() {
    let mut p = ring_plan(5, 8, 4, false, None);
    // The first ring transfer (rank 0 → 1) reduces chunk 4; send chunk 3 instead.
    let id = find(&p, |t| t.op == Op::ReduceSum);
    let seg = p.transfers[id as usize].seg_begin as usize;
    p.segments[seg].src_off -= 8;
    assert_names(&rejected(&p), id, "the input offsets differ");
}

/// Timing of the verifier on big fan-out plans (release: `cargo test --release -- --ignored --nocapture verify_speed`).
#[test]
#[ignore]
fn verify_speed() {
    for servers in [32u32, 128] {
        let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
        let n = c.num_gpus() as usize;
        let t = collsched_core::traffic::generators::uniform(n, 1 << 20, 1).unwrap();
        let p = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        let start = std::time::Instant::now();
        let r = verify(&p).unwrap();
        println!("fanout {n} ranks: {} transfers verified in {:.3} s", r.transfers, start.elapsed().as_secs_f64());
        for algo in ["spreadout", "hierarchical"] {
            let p = plan_all_to_all(&t, &c, algo, &Options::new()).unwrap();
            let start = std::time::Instant::now();
            let r = verify(&p).unwrap();
            println!("{algo} {n} ranks: {} transfers, {} segments verified in {:.3} s", r.transfers, r.segments, start.elapsed().as_secs_f64());
        }
    }
}
