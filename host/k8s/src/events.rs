//! Kubernetes Events (`events.k8s.io/v1`) that keep what they say.
//!
//! kube's `Recorder` folds every Event of one object, type, reason and
//! action within six minutes into the first one's series, whatever its note
//! says: a second `Topology` plan or a new `ReconcileFailed` error would
//! only raise a count under the first note. This recorder keys a series on
//! the note too, so a new message is a new Event and only an exact repeat
//! raises a count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;

/// How long an Event takes repeats into its series.
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// One thing to say about an object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Note {
    pub type_: EventType,
    /// Why, in one CamelCase word (`ReconcileFailed`).
    pub reason: String,
    /// What the controller was doing (`Reconcile`).
    pub action: String,
    /// What happened, for humans.
    pub note: String,
}

/// Which Event a repeat of a note about an object belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    note: Note,
}

/// Records Events as controller `controller`, instance `instance`.
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    sent: Mutex<HashMap<Key, Event>>,
}

impl Recorder {
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        Recorder {
            client,
            controller: controller.into(),
            instance: instance.into(),
            sent: Mutex::new(HashMap::new()),
        }
    }

    /// Records `note` about `regarding`: a new Event, or, for an exact
    /// repeat within six minutes, one more in the earlier Event's series.
    pub async fn publish(&self, note: &Note, regarding: &ObjectReference) -> kube::Result<()> {
        let now = Timestamp::now();
        let key = Key {
            regarding: (
                regarding.api_version.clone(),
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
            ),
            note: note.clone(),
        };
        let earlier = {
            let mut sent = self.sent.lock().unwrap();
            sent.retain(|_, e| now.duration_since(last_seen(e)) < SERIES_TTL.try_into().unwrap());
            sent.get(&key).cloned()
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let event = match earlier {
            Some(mut e) => {
                e.series = Some(repeat(e.series.as_ref(), now));
                let name = e.metadata.name.clone().unwrap_or_default();
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&e))
                    .await?;
                e
            }
            None => {
                let e = self.event(note, regarding, now);
                api.create(&PostParams::default(), &e).await?;
                e
            }
        };
        self.sent.lock().unwrap().insert(key, event);
        Ok(())
    }

    fn event(&self, note: &Note, regarding: &ObjectReference, now: Timestamp) -> Event {
        Event {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            action: Some(note.action.clone()),
            reason: Some(note.reason.clone()),
            note: Some(note.note.clone()),
            type_: Some(
                match note.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

/// The series after one more repeat at `now`.
fn repeat(series: Option<&EventSeries>, now: Timestamp) -> EventSeries {
    EventSeries {
        count: series.map_or(2, |s| s.count + 1),
        last_observed_time: MicroTime(now),
    }
}

/// When an Event was last seen: its series' last repeat, else its time.
fn last_seen(e: &Event) -> Timestamp {
    e.series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or(e.event_time.as_ref().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response};
    use kube::client::Body;

    fn note(text: &str) -> Note {
        Note {
            type_: EventType::Warning,
            reason: "ReconcileFailed".into(),
            action: "Reconcile".into(),
            note: text.into(),
        }
    }

    /// A new note is a new Event (POST); an exact repeat is a series bump
    /// (PATCH of the earlier Event); another new note is a new Event again.
    #[tokio::test]
    async fn a_new_note_is_a_new_event_and_a_repeat_raises_a_count() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let recorder = Recorder::new(client, "shardgate", "test");
        let regarding = ObjectReference {
            api_version: Some("shardgate.io/v1alpha1".into()),
            kind: Some("ValkeyCluster".into()),
            namespace: Some("ns".into()),
            name: Some("c".into()),
            ..ObjectReference::default()
        };
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..3 {
                let (request, send) = handle.next_request().await.expect("a request");
                let method = request.method().clone();
                let path = request.uri().path().to_string();
                let body = request.into_body().collect_bytes().await.unwrap();
                let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
                seen.push((
                    method,
                    path,
                    event["note"].clone(),
                    event["series"]["count"].clone(),
                ));
                send.send_response(Response::builder().body(Body::from(body.to_vec())).unwrap());
            }
            seen
        });
        recorder.publish(&note("a"), &regarding).await.unwrap();
        recorder.publish(&note("a"), &regarding).await.unwrap();
        recorder.publish(&note("b"), &regarding).await.unwrap();
        let seen = server.await.unwrap();
        let path = "/apis/events.k8s.io/v1/namespaces/ns/events";
        assert_eq!(seen[0].0, Method::POST);
        assert_eq!(seen[0].1, path);
        assert_eq!(seen[0].2, "a");
        assert_eq!(seen[1].0, Method::PATCH);
        assert!(
            seen[1].1.starts_with(&format!("{path}/c.")),
            "{}",
            seen[1].1
        );
        assert_eq!(seen[1].3, 2);
        assert_eq!(seen[2].0, Method::POST);
        assert_eq!(seen[2].2, "b");
    }
}
