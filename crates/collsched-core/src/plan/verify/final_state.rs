//! What the Output buffers must hold when the plan has run, per collective,
//! and the comparison against the symbolic memory.
use super::contents::{Content, Origin};
use super::describe_transfer;
use super::memory::Region;
use crate::error::{Error, Result};
use crate::plan::{Collective, Plan};

/// One stretch of the expected output of a rank: `[lo, hi)` holds `content` onwards.
struct Expected {
    lo: u64,
    hi: u64,
    content: Content,
    label: Label,
}

/// What an expected stretch is, for messages (formatted only on error: there are P² blocks).
#[derive(Clone, Copy)]
enum Label {
    Block(usize, usize),
    Shard(u32),
    ReducedShard(u32),
    ReducedBuffer,
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Label::Block(i, j) => write!(f, "block {i}→{j}"),
            Label::Shard(q) => write!(f, "shard of rank {q}"),
            Label::ReducedShard(r) => write!(f, "reduced shard {r}"),
            Label::ReducedBuffer => f.write_str("reduced buffer"),
        }
    }
}

fn expected_output(collective: &Collective, rank: u32, offsets: &Option<(Vec<u64>, Vec<u64>)>) -> Vec<Expected> {
    let mut out = Vec::new();
    let mut push = |lo: u64, len: u64, content: Content, label: Label| {
        if len > 0 {
            out.push(Expected { lo, hi: lo + len, content, label });
        }
    };
    match collective {
        Collective::AllToAll { traffic } => {
            let n = traffic.n();
            let (send, recv) = offsets.as_ref().expect("all-to-all offsets");
            let j = rank as usize;
            for i in 0..n {
                push(recv[i * n + j], traffic.get(i, j), Content::input(i as u32, send[i * n + j]), Label::Block(i, j));
            }
        }
        Collective::AllGather { ranks, shard_bytes } => {
            for q in 0..*ranks {
                push(q as u64 * shard_bytes, *shard_bytes, Content::input(q, 0), Label::Shard(q));
            }
        }
        Collective::ReduceScatter { ranks, shard_bytes, .. } => {
            let content = Content { origin: Origin::all(*ranks), off: rank as u64 * shard_bytes };
            push(0, *shard_bytes, content, Label::ReducedShard(rank));
        }
        Collective::AllReduce { ranks, bytes, .. } => {
            push(0, *bytes, Content { origin: Origin::all(*ranks), off: 0 }, Label::ReducedBuffer);
        }
    }
    out
}

/// Compare every rank's Output (`outputs[rank]`) with what the collective defines.
pub fn check_outputs(plan: &Plan, outputs: &[&Region]) -> Result<()> {
    let ranks = plan.num_ranks();
    let offsets = match &plan.collective {
        Collective::AllToAll { traffic } => Some((traffic.send_offsets(), traffic.recv_offsets())),
        _ => None,
    };
    for rank in 0..ranks {
        let expected = expected_output(&plan.collective, rank, &offsets);
        let mut runs = outputs[rank as usize].iter().peekable();
        for e in &expected {
            let mut pos = e.lo;
            while pos < e.hi {
                while runs.peek().is_some_and(|(_, r)| r.end <= pos) {
                    runs.next();
                }
                let (start, run) = match runs.peek() {
                    Some((&s, r)) if s <= pos => (s, *r),
                    other => {
                        let gap_end = other.map_or(e.hi, |(&s, _)| s.min(e.hi));
                        return Err(Error::Verification(format!(
                            "final state: output of rank {rank} bytes [{pos:#x}..{gap_end:#x}) ({}) never written; expected {}",
                            e.label,
                            e.content.shifted(pos - e.lo).describe(gap_end - pos, ranks)
                        )));
                    }
                };
                let upto = run.end.min(e.hi);
                let found = run.content.shifted(pos - start);
                let want = e.content.shifted(pos - e.lo);
                if found != want {
                    return Err(Error::Verification(format!(
                        "final state: output of rank {rank} bytes [{pos:#x}..{upto:#x}) ({}): expected {}, found {} (written by {})",
                        e.label,
                        want.describe(upto - pos, ranks),
                        found.describe(upto - pos, ranks),
                        describe_transfer(plan, run.writer)
                    )));
                }
                pos = upto;
            }
        }
    }
    Ok(())
}
