//! Check 4: strict serializability (no cycle in conflict plus real-time order).

use std::collections::{HashMap, VecDeque};

use super::realtime::answered_at;
use super::replay::Edge;
use super::{History, Moment};
use crate::violation::{Violation, ViolationKind};

/// Check 4: the conflict edges plus the real-time order must be acyclic. Real-time edges are
/// compressed through a chain of "time" nodes, one per answer in answer order: A -> T(A),
/// T(k) -> T(k+1), and T(last answer before B's dispatch) -> B.
pub(super) fn serializable(history: &History, ordered: &[usize], conflicts: &[Edge]) -> Result<(), Violation> {
    let n = history.txns.len();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(from, to) in conflicts {
        succ[from].push(to);
    }
    let present = add_real_time(history, ordered, ordered, &mut succ);
    let Err(cycle) = topological_order(&succ, &present) else { return Ok(()) };
    let describe: Vec<String> = cycle
        .iter()
        .filter(|&&v| v < n)
        .map(|&v| {
            let r = &history.txns[v];
            format!(
                "{:?}(ts {:?}, dispatched {} us, answered {} us, shards {:?})",
                r.id,
                r.ts(),
                r.dispatched.us,
                answered_at(r).us,
                r.pieces.iter().map(|p| p.shard).collect::<Vec<_>>()
            )
        })
        .collect();
    Err(Violation::new(
        ViolationKind::NotSerializable,
        format!(
            "the conflict order (timestamp order per key) and the real-time order form a cycle: {}",
            describe.join(" -> ")
        ),
    ))
}

/// Adds real time among `answered` to the graph `succ` over `history`'s transactions (as
/// many nodes as transactions): a chain of time nodes, one per answer in answer order, each
/// after its transaction and before every transaction dispatched after that answer (so the
/// real-time order costs O(n) edges). Returns which nodes exist: `nodes` and the time nodes.
pub(super) fn add_real_time(
    history: &History,
    nodes: &[usize],
    answered: &[usize],
    succ: &mut Vec<Vec<usize>>,
) -> Vec<bool> {
    let n = history.txns.len();
    let mut by_answer = answered.to_vec();
    by_answer.sort_by_key(|&i| answered_at(&history.txns[i]));
    let answers: Vec<Moment> = by_answer.iter().map(|&i| answered_at(&history.txns[i])).collect();
    let total = n + by_answer.len();
    succ.resize(total, Vec::new());
    for (k, &a) in by_answer.iter().enumerate() {
        succ[a].push(n + k);
        if k + 1 < by_answer.len() {
            succ[n + k].push(n + k + 1);
        }
    }
    for &b in answered {
        let before = answers.partition_point(|m| *m < history.txns[b].dispatched);
        if before > 0 {
            succ[n + before - 1].push(b);
        }
    }
    let mut present = vec![false; total];
    for &i in nodes {
        present[i] = true;
    }
    for p in present.iter_mut().skip(n) {
        *p = true;
    }
    present
}

/// Kahn's algorithm over the `present` nodes of the graph `succ` (successor lists; edges from
/// absent nodes are ignored): every present node in an order that respects the edges, or, if
/// there is none, a cycle among them (in edge order). Both the serializability check and the
/// baselines' derived order use it.
pub(super) fn topological_order(succ: &[Vec<usize>], present: &[bool]) -> Result<Vec<usize>, Vec<usize>> {
    let total = present.len();
    let mut indegree = vec![0usize; total];
    for (v, s) in succ.iter().enumerate() {
        if present[v] {
            for &t in s {
                indegree[t] += 1;
            }
        }
    }
    let mut ready: VecDeque<usize> = (0..total).filter(|&v| present[v] && indegree[v] == 0).collect();
    let mut order = Vec::new();
    let live = present.iter().filter(|p| **p).count();
    while let Some(v) = ready.pop_front() {
        order.push(v);
        for &t in &succ[v] {
            indegree[t] -= 1;
            if indegree[t] == 0 {
                ready.push_back(t);
            }
        }
    }
    if order.len() == live {
        return Ok(order);
    }
    // A cycle among the leftovers: walk leftover predecessors until one repeats.
    let mut pred: Vec<Vec<usize>> = vec![Vec::new(); total];
    for (v, s) in succ.iter().enumerate() {
        for &t in s {
            if present[v] && indegree[v] > 0 && indegree[t] > 0 {
                pred[t].push(v);
            }
        }
    }
    let start =
        (0..total).find(|&v| present[v] && indegree[v] > 0).expect("a cycle leaves nodes with positive in-degree");
    let mut path = vec![start];
    let mut on_path: HashMap<usize, usize> = HashMap::from([(start, 0)]);
    loop {
        let v = *path.last().expect("non-empty");
        let p = *pred[v].first().expect("leftover nodes have leftover predecessors");
        if let Some(&pos) = on_path.get(&p) {
            let mut c = path[pos..].to_vec();
            c.reverse();
            return Err(c);
        }
        on_path.insert(p, path.len());
        path.push(p);
    }
}
