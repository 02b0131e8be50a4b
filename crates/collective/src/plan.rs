//! Each algorithm as a schedule: a list of steps, each a set of transfers
//! (byte ranges of the rank's work buffer) to send to and receive from other
//! ranks. Every rank computes the same step numbering, so a message names
//! its step and sender and the receiver knows where it goes; a rank with
//! nothing to do in a step passes it at once.

use crate::wire::{Algorithm, Op};
use std::ops::Range;

/// How received bytes enter the work buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    Copy,
    Reduce,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// The other rank.
    pub peer: usize,
    pub range: Range<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    pub sends: Vec<Transfer>,
    pub recvs: Vec<Transfer>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub combine: Combine,
    /// The work buffer holds bytes `work_base..work_base + work_len` of the
    /// collective's layout; every range of the plan (and every offset on
    /// the wire) is in that layout. A gather's or scatter's non-root holds
    /// only its own block.
    pub work_base: usize,
    /// Bytes of the work buffer.
    pub work_len: usize,
    /// Where this rank's input goes (empty: it gives no input).
    pub input: Range<usize>,
    /// What this rank gets back (empty: nothing, e.g. a reduce's non-root).
    pub output: Range<usize>,
    pub steps: Vec<Step>,
    /// Reduction steps run in `Combine::Copy` from this step on (the ring's all-gather).
    pub copy_from: usize,
    /// The plan has one step whose sends are parts of the input that no
    /// receive overwrites (a scatter's root, a gather's non-root): their
    /// messages are built from the input when the call starts, and the
    /// work buffer holds only the part of the input that is this rank's
    /// output (a scatter root's own block; nothing for a gather's
    /// non-root), so those bytes are copied once, not into the work
    /// buffer and again into the messages (`docs/collectives.md`, "Large
    /// messages"). The sends' ranges lie outside the work buffer.
    pub sends_from_input: bool,
}

/// Run-time thresholds for picking an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// All-reduce: at least this many bytes per rank use the ring, fewer use
    /// recursive doubling (when the rank count is a power of two).
    pub ring_min_bytes: usize,
    /// Broadcast and reduce: a tree from this many ranks on …
    pub tree_min_ranks: usize,
    /// … and this many bytes; below either, one-to-all.
    pub tree_min_bytes: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            ring_min_bytes: 64 << 10,
            tree_min_ranks: 4,
            tree_min_bytes: 64 << 10,
        }
    }
}

/// The algorithm for `op` on `n` ranks with `bytes` per rank.
pub fn choose(op: Op, n: usize, bytes: usize, t: &Thresholds) -> Algorithm {
    match op {
        Op::Broadcast | Op::Reduce if n >= t.tree_min_ranks && bytes >= t.tree_min_bytes => {
            Algorithm::Tree
        }
        Op::AllReduce if n.is_power_of_two() && bytes < t.ring_min_bytes => {
            Algorithm::RecursiveDoubling
        }
        Op::AllReduce => Algorithm::Ring,
        _ => Algorithm::OneToAll,
    }
}

/// Why an algorithm cannot run a collective.
pub fn unsupported(op: Op, algorithm: Algorithm, n: usize) -> Option<String> {
    let ok = match (op, algorithm) {
        (_, Algorithm::Auto) => true,
        (Op::Broadcast | Op::Reduce, Algorithm::OneToAll | Algorithm::Tree) => true,
        (Op::Gather | Op::Scatter, Algorithm::OneToAll) => true,
        (Op::AllReduce, Algorithm::Ring) => true,
        (Op::AllReduce, Algorithm::RecursiveDoubling) => {
            if !n.is_power_of_two() {
                return Some(format!(
                    "recursive doubling needs a power-of-two rank count, the communicator has {n}"
                ));
            }
            true
        }
        _ => false,
    };
    (!ok).then(|| format!("{} cannot run {}", algorithm.name(), op.name()))
}

/// The schedule of rank `rank` of `n` for `op` with `len` bytes per rank,
/// `elem` bytes per element. `algorithm` must be supported (not `Auto`).
pub fn plan(
    op: Op,
    algorithm: Algorithm,
    n: usize,
    rank: usize,
    root: usize,
    len: usize,
    elem: usize,
) -> Plan {
    let all = 0..len;
    let block = |r: usize| r * len..(r + 1) * len;
    let mut p = Plan {
        combine: if op.reduces() {
            Combine::Reduce
        } else {
            Combine::Copy
        },
        work_base: 0,
        work_len: len,
        input: all.clone(),
        output: all.clone(),
        steps: Vec::new(),
        copy_from: usize::MAX,
        sends_from_input: false,
    };
    match (op, algorithm) {
        (Op::Broadcast, Algorithm::Tree) => {
            if rank != root {
                p.input = 0..0;
            }
            p.steps = binomial(n, rank, root, &all, false);
        }
        (Op::Broadcast, _) => {
            if rank != root {
                p.input = 0..0;
            }
            p.steps = vec![star(n, rank, root, |_| all.clone(), false)];
        }
        (Op::Reduce, Algorithm::Tree) => {
            if rank != root {
                p.output = 0..0;
            }
            p.steps = binomial(n, rank, root, &all, true);
        }
        (Op::Reduce, _) => {
            if rank != root {
                p.output = 0..0;
            }
            p.steps = vec![star(n, rank, root, |_| all.clone(), true)];
        }
        (Op::Gather, _) => {
            // A non-root's block goes out from its input; it keeps nothing.
            (p.work_base, p.work_len) = if rank == root {
                (0, n * len)
            } else {
                (rank * len, 0)
            };
            p.sends_from_input = rank != root;
            p.input = block(rank);
            p.output = if rank == root { 0..n * len } else { 0..0 };
            p.steps = vec![star(n, rank, root, block, true)];
        }
        (Op::Scatter, _) => {
            // The root's other blocks go out from its input; it keeps its own.
            (p.work_base, p.work_len) = (rank * len, len);
            p.sends_from_input = rank == root;
            p.input = if rank == root { 0..n * len } else { 0..0 };
            p.output = block(rank);
            p.steps = vec![star(n, rank, root, block, false)];
        }
        (Op::AllReduce, Algorithm::RecursiveDoubling) => {
            let mut k = 1;
            while k < n {
                let partner = rank ^ k;
                p.steps.push(Step {
                    sends: vec![Transfer {
                        peer: partner,
                        range: all.clone(),
                    }],
                    recvs: vec![Transfer {
                        peer: partner,
                        range: all.clone(),
                    }],
                });
                k <<= 1;
            }
        }
        (Op::AllReduce, _) => {
            // Chunk i: elements [i·c/n, (i+1)·c/n) — whole elements, possibly empty.
            let count = len / elem;
            let chunk = |i: usize| (i * count / n) * elem..((i + 1) * count / n) * elem;
            let next = (rank + 1) % n;
            let prev = (rank + n - 1) % n;
            let exchange = |send: usize, recv: usize| Step {
                sends: nonempty(next, chunk(send)),
                recvs: nonempty(prev, chunk(recv)),
            };
            if n > 1 {
                for s in 0..n - 1 {
                    p.steps
                        .push(exchange((rank + n - s) % n, (rank + 2 * n - s - 1) % n));
                }
                p.copy_from = n - 1;
                for s in 0..n - 1 {
                    p.steps
                        .push(exchange((rank + 1 + n - s) % n, (rank + n - s) % n));
                }
            }
        }
    }
    p
}

fn nonempty(peer: usize, range: Range<usize>) -> Vec<Transfer> {
    if range.is_empty() {
        Vec::new()
    } else {
        vec![Transfer { peer, range }]
    }
}

/// One step between the root and every other rank: towards the root
/// (`to_root`) or from it; `part(r)` is rank r's range.
fn star(
    n: usize,
    rank: usize,
    root: usize,
    part: impl Fn(usize) -> Range<usize>,
    to_root: bool,
) -> Step {
    let mut step = Step::default();
    if rank == root {
        let peers = (0..n).filter(|&r| r != root);
        let list = peers
            .map(|r| Transfer {
                peer: r,
                range: part(r),
            })
            .collect();
        if to_root {
            step.recvs = list;
        } else {
            step.sends = list;
        }
    } else {
        let t = vec![Transfer {
            peer: root,
            range: part(rank),
        }];
        if to_root {
            step.sends = t;
        } else {
            step.recvs = t;
        }
    }
    step
}

/// A binomial tree rooted at `root`: ⌈log2 n⌉ steps. Down the tree
/// (broadcast): in step k, relative ranks below 2^k send to rel + 2^k.
/// Up the tree (reduce, `up`): the same edges in reverse order.
fn binomial(n: usize, rank: usize, root: usize, all: &Range<usize>, up: bool) -> Vec<Step> {
    let rounds = n.next_power_of_two().trailing_zeros() as usize;
    let rel = (rank + n - root) % n;
    let abs = |r: usize| (r + root) % n;
    let mut steps = Vec::with_capacity(rounds);
    for j in 0..rounds {
        let k = if up { rounds - 1 - j } else { j };
        let bit = 1usize << k;
        let mut step = Step::default();
        let parent = (rel >= bit && rel < 2 * bit).then(|| abs(rel - bit));
        let child = (rel < bit && rel + bit < n).then(|| abs(rel + bit));
        let t = |peer| Transfer {
            peer,
            range: all.clone(),
        };
        if up {
            step.sends.extend(parent.map(t));
            step.recvs.extend(child.map(t));
        } else {
            step.recvs.extend(parent.map(t));
            step.sends.extend(child.map(t));
        }
        steps.push(step);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every send of rank a to b in step s is a receive of b from a in step s, same range.
    fn check_matched(op: Op, algorithm: Algorithm, n: usize, root: usize) {
        let plans: Vec<Plan> = (0..n)
            .map(|r| plan(op, algorithm, n, r, root, 40, 4))
            .collect();
        let steps = plans[0].steps.len();
        for (a, p) in plans.iter().enumerate() {
            assert_eq!(p.steps.len(), steps);
            for (s, step) in p.steps.iter().enumerate() {
                for t in &step.sends {
                    let back = &plans[t.peer].steps[s].recvs;
                    assert!(
                        back.iter().any(|r| r.peer == a && r.range == t.range),
                        "{op:?} {algorithm:?} n={n} step {s}: {a}→{} unmatched",
                        t.peer
                    );
                }
            }
            let held = p.work_base..p.work_base + p.work_len;
            let inside =
                |r: &Range<usize>| r.is_empty() || (held.start <= r.start && r.end <= held.end);
            // Within the input: a range the input covers (`sends_from_input`).
            let of_input = |r: &Range<usize>| {
                r.is_empty() || (p.input.start <= r.start && r.end <= p.input.end)
            };
            if p.sends_from_input {
                assert_eq!(p.steps.len(), 1, "{op:?} rank {a}");
                assert!(p.steps[0].recvs.is_empty(), "{op:?} rank {a}");
                assert!(of_input(&held), "{op:?} rank {a}: work outside the input");
            } else {
                assert!(
                    inside(&p.input),
                    "{op:?} rank {a}: input outside the work buffer"
                );
            }
            assert!(
                inside(&p.output),
                "{op:?} rank {a}: output outside the work buffer"
            );
            for s in &p.steps {
                for t in &s.recvs {
                    assert!(
                        inside(&t.range),
                        "{op:?} {algorithm:?} n={n} rank {a}: {:?} outside {held:?}",
                        t.range
                    );
                }
                for t in &s.sends {
                    let ok = if p.sends_from_input {
                        of_input(&t.range)
                    } else {
                        inside(&t.range)
                    };
                    assert!(
                        ok,
                        "{op:?} {algorithm:?} n={n} rank {a}: send {:?} outside",
                        t.range
                    );
                }
            }
            let recvs: usize = p.steps.iter().map(|s| s.recvs.len()).sum();
            let matched: usize = plans
                .iter()
                .flat_map(|q| q.steps.iter().flat_map(|s| &s.sends))
                .filter(|t| t.peer == a)
                .count();
            assert_eq!(recvs, matched);
        }
    }

    #[test]
    fn every_send_meets_a_receive() {
        for n in 1..=9 {
            for root in [0, n - 1] {
                check_matched(Op::Broadcast, Algorithm::Tree, n, root);
                check_matched(Op::Broadcast, Algorithm::OneToAll, n, root);
                check_matched(Op::Reduce, Algorithm::Tree, n, root);
                check_matched(Op::Reduce, Algorithm::OneToAll, n, root);
                check_matched(Op::Gather, Algorithm::OneToAll, n, root);
                check_matched(Op::Scatter, Algorithm::OneToAll, n, root);
            }
            check_matched(Op::AllReduce, Algorithm::Ring, n, 0);
            if n.is_power_of_two() {
                check_matched(Op::AllReduce, Algorithm::RecursiveDoubling, n, 0);
            }
        }
    }

    #[test]
    fn picks_by_size_and_ranks() {
        let t = Thresholds::default();
        assert_eq!(
            choose(Op::AllReduce, 4, 1024, &t),
            Algorithm::RecursiveDoubling
        );
        assert_eq!(choose(Op::AllReduce, 3, 1024, &t), Algorithm::Ring);
        assert_eq!(choose(Op::AllReduce, 4, 1 << 20, &t), Algorithm::Ring);
        assert_eq!(choose(Op::Broadcast, 4, 1 << 20, &t), Algorithm::Tree);
        assert_eq!(choose(Op::Broadcast, 2, 1 << 20, &t), Algorithm::OneToAll);
        assert_eq!(choose(Op::Reduce, 8, 1024, &t), Algorithm::OneToAll);
        assert!(unsupported(Op::AllReduce, Algorithm::RecursiveDoubling, 3).is_some());
        assert!(unsupported(Op::Gather, Algorithm::Ring, 4).is_some());
    }
}
