//! Stage 2, the guest: the reconcile module computes the desired state from
//! the input, off the async threads, within a slot of the memory budget and
//! under the wall-clock guard ([`shardgate_wasm::guard`]). A call that
//! traps, exits, runs out of time or memory counts towards rolling the
//! module back (per cluster); a verdict on an invalid spec is an answer
//! like any other.

use std::time::{Duration, Instant};

use shardgate_contract::model::{Desired, Input, Violation};
use shardgate_valkey::Nodes;
use shardgate_wasm::guard;

use super::Error;
use crate::context::Context;

/// The desired state, or the violations that refuse the spec.
pub type Verdict = Result<Desired, Vec<Violation>>;

/// How long a reconcile waits for a guest call slot before it fails (a
/// host error, retried with backoff; it does not count against the module).
pub const SLOT_WAIT: Duration = Duration::from_secs(30);

/// The key a cluster's module failures are counted under: `namespace/name`.
pub fn failure_key(input: &Input) -> String {
    format!("{}/{}", input.cluster.namespace, input.cluster.name)
}

/// Calls the serving module on `input`, with the Valkey nodes' facts.
pub async fn call(
    ctx: &Context,
    mut input: Input,
    valkey: Option<&Nodes>,
) -> Result<Verdict, Error> {
    input.observed.valkey = valkey.map(Nodes::facts);
    let key = failure_key(&input);
    let module = ctx.module();
    let used = module.clone();
    let deadline = guard::deadline_of(&*module);
    // Timed on the blocking thread, so waiting for a slot or a free thread
    // is not counted as guest time.
    let called = guard::call(ctx.budget(), Some(SLOT_WAIT), deadline, move || {
        let started = Instant::now();
        let result = module.reconcile(&input);
        (result, started.elapsed())
    })
    .await;
    let (result, guest_time) = match called {
        Ok((result, time)) => (result, Some(time)),
        Err(e) => (Err(e), None),
    };
    match result {
        Ok(verdict) => {
            ctx.module_succeeded(&used, &key);
            if let Some(time) = guest_time {
                ctx.metrics.observe_guest(time);
            }
            Ok(verdict.map_err(|invalid| invalid.violations))
        }
        Err(e) => {
            ctx.module_failed(&used, &key, &e);
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shardgate_contract::model::{Cluster, Error as GuestError, Severity};
    use shardgate_wasm::swap::{ModuleManager, Serving, Unobserved};
    use shardgate_wasm::{CallError, Reconciler};

    use super::*;

    /// Answers every call the same way.
    struct Fixed(fn() -> Result<Result<Desired, GuestError>, CallError>);

    impl Reconciler for Fixed {
        fn reconcile(&self, _: &Input) -> Result<Result<Desired, GuestError>, CallError> {
            (self.0)()
        }
        fn validate(&self, _: &Cluster) -> Result<Vec<Violation>, CallError> {
            Ok(Vec::new())
        }
    }

    fn serving(module: Fixed, digest: &str) -> Serving {
        Serving {
            module: Arc::new(module),
            digest: digest.into(),
            source: "test".into(),
        }
    }

    fn invalid() -> Result<Result<Desired, GuestError>, CallError> {
        Ok(Err(GuestError {
            violations: vec![Violation {
                severity: Severity::Error,
                field: "spec.shards".into(),
                message: "must be at least 1".into(),
            }],
        }))
    }

    #[tokio::test]
    async fn answers_count_as_successes_and_traps_roll_the_module_back() {
        type Call = fn() -> Result<Result<Desired, GuestError>, CallError>;
        let cases: [(&str, Call, &str, &str); 6] = [
            ("desired", || Ok(Ok(Desired::default())), "desired", "new"),
            ("refusal", invalid, "refused: spec.shards", "new"),
            (
                "trap",
                || Err(CallError::Trap("unreachable".into())),
                "module failed",
                "previous",
            ),
            (
                "host error",
                || Err(CallError::Host(anyhow::anyhow!("no thread"))),
                "module failed",
                "new",
            ),
            (
                "exit",
                || Err(CallError::Exit(3)),
                "module failed",
                "previous",
            ),
            (
                "no slot",
                || Err(CallError::Busy(Duration::from_secs(1))),
                "module failed",
                "new",
            ),
        ];
        for (case, call, want, serving_after) in cases {
            let modules = Arc::new(
                ModuleManager::new(
                    serving(Fixed(|| Ok(Ok(Desired::default()))), "previous"),
                    Arc::new(Unobserved),
                )
                .with_rollback_after(1),
            );
            modules.install(serving(Fixed(call), "new"));
            let ctx = Context::for_tests(modules.clone());
            let got = match call_input(&ctx).await {
                Ok(Ok(_)) => "desired".to_string(),
                Ok(Err(v)) => format!("refused: {}", v[0].field),
                Err(Error::Module(_)) => "module failed".to_string(),
                Err(e) => panic!("{case}: {e}"),
            };
            assert_eq!(got, want, "{case}");
            assert_eq!(modules.serving().digest, serving_after, "{case}");
        }
    }

    async fn call_input(ctx: &Context) -> Result<Verdict, Error> {
        call(ctx, Input::default(), None).await
    }
}
