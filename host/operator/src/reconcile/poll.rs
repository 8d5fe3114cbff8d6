//! Between looks while Valkey reshapes ([`Recheck::Adaptive`]): the nodes
//! the look reached are asked for their facts again over the same
//! connections, soon and then less and less often, and the poll ends as soon
//! as anything the plan was made from changed: a node's facts, the cluster's
//! Pods, or its spec. The next look, in the same reconcile (no debounce),
//! then plans at once, so each phase starts about when Valkey allows it
//! instead of on a fixed tick; a phase that needs no wait (slots assigned,
//! then replicas told whom to follow) shows as changed facts at the first
//! poll, right after the steps ran. The guest stays pure: only the host
//! decides when to ask.
//!
//! [`Recheck::Adaptive`]: super::Recheck::Adaptive

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use shardgate_k8s::cache::PodState;
use shardgate_k8s::crd::ValkeyCluster;
use shardgate_valkey::Nodes;

use crate::context::Context;

/// The wait before the second poll; each later wait is twice the one
/// before, up to [`POLL_LONGEST`].
pub const POLL_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two polls.
pub const POLL_LONGEST: Duration = Duration::from_secs(1);

/// The waits before each poll, `budget` in all: none before the first
/// when `steps_ran` (their effect may already show), else
/// [`POLL_FIRST`]; then twice as long each time up to [`POLL_LONGEST`];
/// the last is cut to end at `budget`.
pub fn schedule(steps_ran: bool, budget: Duration) -> Vec<Duration> {
    let mut waits = Vec::new();
    let mut total = Duration::ZERO;
    let mut next = if steps_ran {
        Duration::ZERO
    } else {
        POLL_FIRST
    };
    while total < budget || (waits.is_empty() && budget.is_zero()) {
        let wait = next.min(budget - total);
        waits.push(wait);
        total += wait;
        next = if next.is_zero() {
            POLL_FIRST
        } else {
            (next * 2).min(POLL_LONGEST)
        };
    }
    waits
}

/// What a poll compares to tell that the cluster's Kubernetes side moved:
/// its spec's generation and each of its Pods' IP and readiness.
#[derive(Debug, PartialEq)]
pub struct Seen {
    generation: Option<i64>,
    pods: Vec<Option<PodState>>,
}

impl Seen {
    /// What the caches hold of `vc` now.
    pub fn now(ctx: &Context, vc: &ValkeyCluster) -> Self {
        let namespace = vc.namespace().unwrap_or_default();
        let generation = ctx
            .clusters
            .get(&ObjectRef::from_obj(vc))
            .and_then(|c| c.metadata.generation);
        let pods = ctx
            .caches
            .pods
            .labelled(&namespace, &vc.name_any())
            .iter()
            .map(|p| p.state.clone())
            .collect();
        Seen { generation, pods }
    }
}

/// How a poll ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// A node's facts changed.
    Valkey,
    /// The cluster's spec or Pods changed.
    Kubernetes,
    /// Nothing changed within the budget.
    Quiet,
}

/// What a look that ended with Valkey reshaping leaves to poll.
pub struct Wait {
    /// The nodes it reached, with the facts its plan was made from.
    pub nodes: Nodes,
    /// The Kubernetes side it saw.
    pub seen: Seen,
    /// Its plan's steps ran.
    pub steps_ran: bool,
    /// The longest the poll may take.
    pub budget: Duration,
    /// What the plan waits for, in words.
    pub waiting: String,
}

impl Wait {
    /// Polls by [`schedule`] until something the plan was made from
    /// changed, or the budget is spent.
    pub async fn until_changed(&mut self, ctx: &Context, vc: &ValkeyCluster) -> Polled {
        for wait in schedule(self.steps_ran, self.budget) {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if Seen::now(ctx, vc) != self.seen {
                return Polled::Kubernetes;
            }
            if self.nodes.refresh().await {
                return Polled::Valkey;
            }
        }
        Polled::Quiet
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_start_soon_and_thin_out_within_the_budget() {
        let ms = Duration::from_millis;
        for (steps_ran, budget, want) in [
            // Steps ran: look at once, then 50 ms, doubling.
            (true, ms(1000), vec![0, 50, 100, 200, 400, 250]),
            // Nothing ran: the first look waits 50 ms.
            (false, ms(1000), vec![50, 100, 200, 400, 250]),
            (false, ms(3000), vec![50, 100, 200, 400, 800, 1000, 450]),
            (true, ms(120), vec![0, 50, 70]),
            (false, ms(30), vec![30]),
            // No budget: one look all the same.
            (true, ms(0), vec![0]),
            (false, ms(0), vec![0]),
        ] {
            let got: Vec<u128> = schedule(steps_ran, budget)
                .iter()
                .map(Duration::as_millis)
                .collect();
            assert_eq!(got, want, "{steps_ran} {budget:?}");
            assert_eq!(schedule(steps_ran, budget).iter().sum::<Duration>(), budget);
        }
    }
}
