//! Watch streams: replay from a resourceVersion (410 Gone when compacted),
//! live events filtered by namespace and selectors, periodic and on-demand
//! BOOKMARKs, `timeoutSeconds`, and abrupt disconnection on demand.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use axum::body::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::{Instant, Interval};

use crate::errors::ApiError;
use crate::ops::State;
use crate::resources::Res;
use crate::selectors::Selectors;
use crate::store::{EventType, Notice, WatchEvent};
use crate::table::TableWatch;

/// What a watch request asked for.
pub(crate) struct WatchParams {
    pub res: Res,
    pub ns: Option<String>,
    pub selectors: Selectors,
    /// `None` or `Some(0)`: start with the current state as ADDED events.
    pub resource_version: Option<u64>,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Duration,
    pub bookmark_interval: Duration,
    /// `as=Table`: each event's object is a one-row Table (BOOKMARKs an
    /// empty one).
    pub table: Option<TableWatch>,
}

/// `{"type":"<etype>","object":<obj>}` and a newline, written straight from
/// `obj` (no copy of it).
fn event_line(etype: &str, obj: &Value) -> Bytes {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(b"{\"type\":");
    serde_json::to_writer(&mut out, etype).expect("a string serializes");
    out.extend_from_slice(b",\"object\":");
    serde_json::to_writer(&mut out, obj).expect("a Value serializes");
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

impl WatchParams {
    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        if let Some(t) = &self.table {
            return event_line("BOOKMARK", &t.bookmark(rv));
        }
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        event_line(
            "BOOKMARK",
            &json!({"kind": self.res.kind, "apiVersion": self.res.api_version(), "metadata": meta}),
        )
    }

    fn in_scope(&self, obj: &Value) -> bool {
        self.ns
            .as_deref()
            .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns))
    }

    /// The line a committed change turns into for this watch, if any. An
    /// object moving into (out of) the selector is ADDED (DELETED).
    fn render(&mut self, ev: &WatchEvent) -> Option<Bytes> {
        if ev.res_key != self.res.key() || !self.in_scope(&ev.object) {
            return None;
        }
        let now = self.selectors.matches(&ev.object);
        let before = ev
            .prev
            .as_ref()
            .map(|p| self.selectors.matches(p))
            .unwrap_or(now);
        let etype = match (ev.etype, before, now) {
            (EventType::Added, _, true) => EventType::Added,
            (EventType::Deleted, _, true) => EventType::Deleted,
            (EventType::Modified, true, true) => EventType::Modified,
            (EventType::Modified, false, true) => EventType::Added,
            (EventType::Modified, true, false) => EventType::Deleted,
            _ => return None,
        };
        Some(self.object_line(etype.as_str(), &ev.object))
    }

    /// An ADDED/MODIFIED/DELETED line for `obj`, as a Table if asked.
    fn object_line(&mut self, etype: &str, obj: &Value) -> Bytes {
        match &mut self.table {
            Some(t) => event_line(etype, &t.event(&self.res, obj)),
            None => event_line(etype, obj),
        }
    }
}

struct Streaming {
    params: WatchParams,
    pending: VecDeque<Bytes>,
    rx: broadcast::Receiver<Notice>,
    last_rv: u64,
    tick: Interval,
    deadline: Instant,
    done: bool,
}

/// Whether the watch `params` asks for starts from a resourceVersion the
/// history no longer holds: it is answered 410 Gone.
pub(crate) fn expired(state: &State, params: &WatchParams) -> bool {
    match params.resource_version.filter(|rv| *rv != 0) {
        Some(rv) if !params.send_initial_events => state.store.events_since(rv).is_none(),
        _ => false,
    }
}

/// Opens a watch. Must be called with the state lock held so that no event
/// falls between the replayed history and the live subscription.
pub(crate) fn open(
    state: &State,
    mut params: WatchParams,
) -> impl Stream<Item = Result<Bytes, io::Error>> + Send + 'static {
    let mut pending = VecDeque::new();
    let current = state.store.rv();
    let mut done = false;
    match params.resource_version.filter(|rv| *rv != 0) {
        Some(rv) if !params.send_initial_events => match state.store.events_since(rv) {
            Some(events) => pending.extend(events.iter().filter_map(|e| params.render(e))),
            None => {
                let err = ApiError::gone(format!("too old resource version: {rv} ({current})"));
                pending.push_back(event_line("ERROR", &err.to_status()));
                done = true;
            }
        },
        _ => {
            for obj in state.store.list(&params.res.key(), params.ns.as_deref()) {
                if params.selectors.matches(obj) {
                    pending.push_back(params.object_line("ADDED", obj));
                }
            }
            if params.send_initial_events {
                pending.push_back(params.bookmark(current, true));
            }
        }
    }
    let period = params.bookmark_interval.max(Duration::from_millis(10));
    let s = Streaming {
        deadline: Instant::now() + params.timeout,
        tick: tokio::time::interval_at(Instant::now() + period, period),
        rx: state.store.tx.subscribe(),
        params,
        pending,
        last_rv: current,
        done,
    };
    futures::stream::unfold(s, |mut s| async move {
        loop {
            if let Some(b) = s.pending.pop_front() {
                return Some((Ok(b), s));
            }
            if s.done {
                return None;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(s.deadline) => return None,
                _ = s.tick.tick() => {
                    if s.params.bookmarks {
                        let b = s.params.bookmark(s.last_rv, false);
                        s.pending.push_back(b);
                    }
                }
                msg = s.rx.recv() => match msg {
                    Ok(Notice::Event(ev)) => {
                        s.last_rv = ev.rv;
                        if let Some(b) = s.params.render(&ev) {
                            s.pending.push_back(b);
                        }
                    }
                    Ok(Notice::Bookmark(rv)) => {
                        s.last_rv = s.last_rv.max(rv);
                        if s.params.bookmarks {
                            let b = s.params.bookmark(s.last_rv, false);
                            s.pending.push_back(b);
                        }
                    }
                    Ok(Notice::DropAll) | Err(RecvError::Lagged(_)) => {
                        s.done = true;
                        let err = io::Error::new(io::ErrorKind::ConnectionAborted, "watch dropped");
                        return Some((Err(err), s));
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    })
}
