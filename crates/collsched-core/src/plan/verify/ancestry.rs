//! "Is transfer `a` an ancestor of transfer `t` through deps?", asked for a
//! batch of `a`s at once. Ids are a topological order (checked before), so an
//! ancestor always has a smaller id: the backwards search never needs to look
//! below the smallest id asked about.
use crate::plan::Plan;

pub struct Ancestry {
    /// `seen[x] == stamp` when x was reached in the current query.
    seen: Vec<u32>,
    stamp: u32,
    stack: Vec<u32>,
    /// Queries that needed a search beyond the direct dependencies.
    pub searches: u64,
}

impl Ancestry {
    pub fn new(transfers: usize) -> Ancestry {
        Ancestry { seen: vec![0; transfers], stamp: 0, stack: Vec::new(), searches: 0 }
    }

    /// Mark every ancestor of `t` that could be one of `candidates`; afterwards
    /// `is_marked(a)` answers the question for each candidate.
    pub fn mark_for(&mut self, plan: &Plan, t: u32, candidates: impl Iterator<Item = u32> + Clone) {
        self.stamp = self.stamp.checked_add(1).unwrap_or_else(|| {
            self.seen.iter_mut().for_each(|s| *s = 0);
            1
        });
        let stamp = self.stamp;
        let deps = plan.deps_of(&plan.transfers[t as usize]);
        // Fast path: every candidate is a direct dependency.
        for &d in deps {
            self.seen[d as usize] = stamp;
        }
        let floor = match candidates.filter(|&a| self.seen[a as usize] != stamp).min() {
            None => return,
            Some(f) => f,
        };
        self.searches += 1;
        self.stack.clear();
        self.stack.extend(deps.iter().copied().filter(|&d| d >= floor));
        while let Some(x) = self.stack.pop() {
            for &y in plan.deps_of(&plan.transfers[x as usize]) {
                if y >= floor && self.seen[y as usize] != stamp {
                    self.seen[y as usize] = stamp;
                    self.stack.push(y);
                }
            }
        }
    }

    pub fn is_marked(&self, a: u32) -> bool {
        self.seen[a as usize] == self.stamp
    }
}
