//! Fault injection: failing or slowing down matching requests.

use std::time::Duration;

use crate::errors::ApiError;
use crate::verb::Verb;

/// What an injected fault does to a matching request.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Respond 409 Conflict (reason `Conflict`).
    Conflict,
    /// Respond 500 Internal Server Error (reason `InternalError`).
    InternalError,
    /// Delay the request, then serve it normally.
    Latency(Duration),
}

/// A fault rule: requests matching `verb` and `resource` (either may be left
/// open) get `action`, `times` times (`None`: until [`crate::Emulator::clear_faults`]).
///
/// `resource` is the plural (`services`) and matches the main resource and
/// its subresources; `services/status` matches only the subresource.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub verb: Option<Verb>,
    pub resource: Option<String>,
    /// Only requests of this client (its bearer token; see
    /// [`crate::Emulator::kubeconfig_yaml_for`]).
    pub client: Option<String>,
    pub action: FaultAction,
    pub times: Option<u32>,
}

impl Fault {
    /// The next matching request fails with 409 Conflict (once, by default).
    pub fn conflict() -> Self {
        Self {
            verb: None,
            resource: None,
            client: None,
            action: FaultAction::Conflict,
            times: Some(1),
        }
    }

    /// The next matching request fails with 500 (once, by default).
    pub fn internal_error() -> Self {
        Self {
            verb: None,
            resource: None,
            client: None,
            action: FaultAction::InternalError,
            times: Some(1),
        }
    }

    /// Every matching request is delayed by `delay` (until cleared, by default).
    pub fn latency(delay: Duration) -> Self {
        Self {
            verb: None,
            resource: None,
            client: None,
            action: FaultAction::Latency(delay),
            times: None,
        }
    }

    /// Only requests with this verb.
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this resource (plural, optionally `plural/subresource`).
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_string());
        self
    }

    /// Only requests of `client` (its bearer token).
    pub fn client(mut self, client: &str) -> Self {
        self.client = Some(client.to_string());
        self
    }

    /// Applies to the next `n` matching requests.
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    /// Applies until cleared.
    pub fn always(mut self) -> Self {
        self.times = None;
        self
    }

    fn matches(&self, verb: Verb, resource: &str, client: &str) -> bool {
        let res_ok = match &self.resource {
            None => true,
            Some(r) if r.contains('/') => r == resource,
            Some(r) => resource.split('/').next() == Some(r.as_str()),
        };
        self.verb.is_none_or(|v| v == verb)
            && res_ok
            && self.client.as_deref().is_none_or(|c| c == client)
    }
}

/// What to do with one request.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub delay: Duration,
    pub error: Option<ApiError>,
    /// What fired, by kind, for the counts.
    pub fired: Vec<&'static str>,
}

#[derive(Debug, Default)]
pub(crate) struct Faults {
    rules: Vec<Fault>,
}

impl Faults {
    pub fn add(&mut self, f: Fault) {
        self.rules.push(f);
    }

    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// Consumes matching rules for one request of `client`, `verb` on
    /// `resource` (object `name`, if any).
    pub fn check(&mut self, verb: Verb, resource: &str, name: &str, client: &str) -> Verdict {
        let mut v = Verdict::default();
        for rule in self.rules.iter_mut() {
            if rule.times == Some(0) || !rule.matches(verb, resource, client) {
                continue;
            }
            match &rule.action {
                FaultAction::Latency(d) => {
                    v.delay += *d;
                    v.fired.push("latency");
                }
                FaultAction::Conflict if v.error.is_none() => {
                    v.error = Some(ApiError::conflict(resource, name, "injected fault"));
                    v.fired.push("conflict");
                }
                FaultAction::InternalError if v.error.is_none() => {
                    v.error = Some(ApiError::internal(format!(
                        "injected fault: {verb} {resource} {name}"
                    )));
                    v.fired.push("internal error");
                }
                _ => continue,
            }
            if let Some(n) = rule.times.as_mut() {
                *n -= 1;
            }
        }
        self.rules.retain(|r| r.times != Some(0));
        v
    }
}
