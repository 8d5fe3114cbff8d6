//! Waiting on a condition with a deadline, never for a fixed time: the one
//! way every test and bench of shardgate waits.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(5);

/// What a check returns: `true`, or `Some(value)`, once the condition holds.
pub trait Done {
    /// What the check gives once the condition holds.
    type Value;
    /// `Some` once the condition holds, `None` while it does not.
    fn done(self) -> Option<Self::Value>;
}

impl Done for bool {
    type Value = ();
    fn done(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Done for Option<T> {
    type Value = T;
    fn done(self) -> Option<T> {
        self
    }
}

/// Polls `check` until it holds, and returns what it gave; panics naming
/// `what` once `deadline` has passed.
pub async fn until<D: Done>(what: &str, deadline: Duration, check: impl FnMut() -> D) -> D::Value {
    until_or(what, deadline, check, String::new).await
}

/// [`until`], with `context()` added to the panic message: what the test
/// saw when it gave up.
pub async fn until_or<D: Done>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> D,
    context: impl FnOnce() -> String,
) -> D::Value {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = check().done() {
            return v;
        }
        if Instant::now() >= end {
            panic!(
                "timed out after {deadline:?} waiting for: {what}\n{}",
                context()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`until`] with an async check.
pub async fn until_async<D, F, Fut>(what: &str, deadline: Duration, mut check: F) -> D::Value
where
    D: Done,
    F: FnMut() -> Fut,
    Fut: Future<Output = D>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = check().await.done() {
            return v;
        }
        assert!(
            Instant::now() < end,
            "timed out after {deadline:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_what_the_check_gave_once_it_holds() {
        let mut n = 0;
        let got = until("the third poll", Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n)
        })
        .await;
        assert_eq!(got, 3);
        let mut m = 0;
        until_async("an async check", Duration::from_secs(5), || {
            m += 1;
            let done = m > 1;
            async move { done }
        })
        .await;
        assert_eq!(m, 2);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for: never")]
    async fn fails_naming_what_it_waited_for() {
        until("never", Duration::from_millis(20), || false).await;
    }
}
