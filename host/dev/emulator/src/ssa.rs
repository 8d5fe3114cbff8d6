//! Server-side apply: merging an applied configuration into the live object,
//! detecting conflicts with other managers, and removing fields the applier
//! stopped applying.

use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::fieldset::{
    FieldSet, PathElem, Walk, fields_of, get_path, item_key, item_matches, path_string,
    present_fields,
};
use crate::managed_fields::{Actor, Entry};

/// Removes `null` values from maps (a `null` in an applied configuration
/// means "not set by this manager").
pub(crate) fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Merges `cfg` into `live`: maps merge per key, associative lists merge per
/// item key, everything else (scalars, atomic lists/maps) is replaced.
pub(crate) fn merge(live: &mut Value, cfg: &Value, w: &mut Walk<'_>) {
    if let (Value::Object(l), Value::Object(c)) = (&mut *live, cfg)
        && !w.atomic_map()
    {
        for (k, cv) in c {
            w.names.push(k.clone());
            match l.get_mut(k) {
                Some(lv) => merge(lv, cv, w),
                None => {
                    l.insert(k.clone(), cv.clone());
                }
            }
            w.names.pop();
        }
        return;
    }
    if let (Value::Array(l), Value::Array(c), Some(keys)) = (&mut *live, cfg, w.keys())
        && l.iter().chain(c).all(|i| item_key(i, keys).is_some())
    {
        for citem in c {
            let key = item_key(citem, keys);
            match l.iter_mut().find(|i| item_key(i, keys) == key) {
                Some(litem) if w.atomic_items() => *litem = citem.clone(),
                Some(litem) => merge_item(litem, citem, w),
                None => l.push(citem.clone()),
            }
        }
        return;
    }
    *live = cfg.clone();
}

fn merge_item(live: &mut Value, cfg: &Value, w: &mut Walk<'_>) {
    if let (Value::Object(l), Value::Object(c)) = (live, cfg) {
        for (k, cv) in c {
            w.names.push(k.clone());
            match l.get_mut(k) {
                Some(lv) => merge(lv, cv, w),
                None => {
                    l.insert(k.clone(), cv.clone());
                }
            }
            w.names.pop();
        }
    }
}

/// Outcome of an apply against an existing object.
pub(crate) struct Applied {
    /// The live object (in the same coordinates as `live`) after the merge
    /// and removals.
    pub object: Value,
    pub entries: Vec<Entry>,
}

/// Applies `cfg_view` (already restricted to the write's scope, without
/// server-managed metadata and nulls) to `live` on behalf of `actor`.
///
/// `live_view` is `live` restricted the same way, used for conflict checks.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    live: &Value,
    live_view: &Value,
    cfg_view: &Value,
    mut entries: Vec<Entry>,
    actor: &Actor<'_>,
    kind: &str,
    force: bool,
    resource: &str,
    name: &str,
) -> Result<Applied, ApiError> {
    let cfg_set = fields_of(cfg_view, &mut Walk::new(kind));
    let members = cfg_set.members();

    // Conflicts: fields this apply would change that another manager owns.
    let mut conflicts: Vec<(usize, Vec<PathElem>)> = Vec::new();
    let mut conflict = |i: usize, p: &[PathElem]| {
        if !conflicts.iter().any(|(j, q)| *j == i && q == p) {
            conflicts.push((i, p.to_vec()));
        }
    };
    for p in &members {
        // A map or an item this apply adds conflicts with a manager that
        // still owns it (a `.` kept after an apply emptied it).
        for n in 1..p.len() {
            let q = &p[..n];
            if get_path(live_view, q).is_none() {
                for (i, e) in entries.iter().enumerate() {
                    if !actor.owns(e, "Apply") && e.fields.contains(q) {
                        conflict(i, q);
                    }
                }
            }
        }
        // A list item is a member beside its fields: its fields conflict,
        // not the item (unless it is owned whole).
        if matches!(p.last(), Some(PathElem::Key(_))) && !atomic_item(p) {
            continue;
        }
        let (live_v, cfg_v) = (get_path(live_view, p), get_path(cfg_view, p));
        if live_v == cfg_v {
            continue;
        }
        // Only leaves (scalars, atomic maps and lists) are modified; a
        // granular map or list the config has is changed only if added.
        if live_v.is_some() && cfg_v.is_some_and(|v| granular(kind, p, v)) {
            continue;
        }
        for (i, e) in entries.iter().enumerate() {
            // A manager is a name, an operation and a subresource: an apply
            // conflicts with its own name's Update entry too.
            if !actor.owns(e, "Apply") && e.fields.contains(p) {
                conflict(i, p);
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict_error(&entries, &conflicts, resource, name));
        }
        for (i, p) in &conflicts {
            let mut single = FieldSet::default();
            insert_path(&mut single, p);
            entries[*i].fields = entries[*i].fields.difference(&single);
        }
    }

    let mut object = live.clone();
    merge(&mut object, cfg_view, &mut Walk::new(kind));

    let mine = entries.iter().position(|e| actor.owns(e, "Apply"));
    let prev = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();
    let others = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != mine)
        .fold(FieldSet::default(), |acc, (_, e)| acc.union(&e.fields));
    let mut emptied = FieldSet::default();
    prune(
        &mut object,
        &prev,
        Some(&cfg_set.union(&others)),
        &mut Vec::new(),
        &mut emptied,
    );

    // What the apply removed leaves every other manager's set, as the
    // library's update does; a map it emptied is `null` there, not removed,
    // so whoever owned the map itself (`.`) keeps it.
    let removed = present_fields(live, &mut Walk::new(kind))
        .difference(&present_fields(&object, &mut Walk::new(kind)))
        .difference(&emptied);
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != mine {
            e.fields = e.fields.difference(&removed);
        }
    }

    match mine {
        Some(i) => entries[i].fields = cfg_set,
        None => entries.push(actor.new_entry("Apply", cfg_set)),
    }
    Ok(Applied { object, entries })
}

/// Removes what the applier stopped applying, as structured-merge-diff's
/// prune does: `prev` is what it applied last time, `keep` what it applies
/// now and every other manager owns.
/// - A field (at any depth) that `prev` reached and under which nobody owns
///   anything any more goes whole, with whatever unowned content it had: a
///   struct or map whose every field the applier dropped leaves nothing,
///   not `{}`. (`metadata` stays: the applier always sends its name.)
/// - Under a field someone still owns, only what the applier owned and
///   nobody keeps goes; a list item goes unless someone owns the item
///   itself (a sub-field owned by another manager goes with it).
/// - A map or list emptied by those removals goes too (the library leaves
///   it `null`, which decoding drops); its path is added to `emptied`.
fn prune(
    v: &mut Value,
    prev: &FieldSet,
    keep: Option<&FieldSet>,
    at: &mut Vec<PathElem>,
    emptied: &mut FieldSet,
) {
    for (elem, p) in &prev.children {
        let k = keep.and_then(|k| k.children.get(elem));
        at.push(elem.clone());
        match (elem, &mut *v) {
            (PathElem::Field(f), Value::Object(m)) => {
                let owned = k.is_some_and(|k| !k.is_empty()) || (at.len() == 1 && f == "metadata");
                if !owned {
                    m.remove(f);
                } else if let Some(child) = m.get_mut(f) {
                    let before = container_len(child);
                    prune(child, p, k, at, emptied);
                    if before > 0 && container_len(child) == 0 {
                        m.remove(f);
                        insert_path(emptied, at);
                    }
                }
            }
            (PathElem::Key(key), Value::Array(items)) => {
                if let Some(pos) = items.iter().position(|i| item_matches(i, key)) {
                    if p.member && !k.is_some_and(|k| k.member) {
                        items.remove(pos);
                    } else {
                        prune(&mut items[pos], p, k, at, emptied);
                    }
                }
            }
            _ => {}
        }
        at.pop();
    }
}

/// The number of entries of a map or list (scalars count as one).
fn container_len(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 1,
    }
}

/// Whether `v`, the value at `path`, is a map or list apply merges into
/// (not replaced whole).
fn granular(kind: &str, path: &[PathElem], v: &Value) -> bool {
    if matches!(path.last(), Some(PathElem::Key(_))) && atomic_item(path) {
        return false;
    }
    let w = Walk {
        kind,
        names: field_names(path),
    };
    match v {
        Value::Object(_) => !w.atomic_map(),
        Value::Array(_) => w.keys().is_some(),
        _ => false,
    }
}

/// The field names of a path (list items left out), as [`Walk`] keeps them.
fn field_names(path: &[PathElem]) -> Vec<String> {
    path.iter()
        .filter_map(|e| match e {
            PathElem::Field(f) => Some(f.clone()),
            PathElem::Key(_) => None,
        })
        .collect()
}

/// Whether `path` names an item of a list whose items are atomic.
fn atomic_item(path: &[PathElem]) -> bool {
    crate::schema::atomic_items(&field_names(path))
}

pub(crate) fn insert_path(set: &mut FieldSet, path: &[PathElem]) {
    match path.split_first() {
        None => set.member = true,
        Some((first, rest)) => insert_path(set.children.entry(first.clone()).or_default(), rest),
    }
}

fn conflict_error(
    entries: &[Entry],
    conflicts: &[(usize, Vec<PathElem>)],
    resource: &str,
    name: &str,
) -> ApiError {
    // As the API server names a manager: `"name"`, then `with subresource
    // "status"`, and `using v1` for an Update entry.
    let who = |e: &Entry| {
        let mut s = format!("{:?}", e.manager);
        if let Some(sub) = &e.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if e.operation == "Update" {
            s.push_str(&format!(" using {}", e.api_version));
        }
        s
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(i, p)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with {}", who(&entries[*i])),
                "field": path_string(p),
            })
        })
        .collect();
    let n = conflicts.len();
    let message = if let [(i, p)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            who(&entries[*i]),
            path_string(p)
        )
    } else {
        let mut by_manager: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (i, p) in conflicts {
            by_manager
                .entry(who(&entries[*i]))
                .or_default()
                .push(format!("- {}", path_string(p)));
        }
        let lines: Vec<String> = by_manager
            .into_iter()
            .flat_map(|(m, paths)| std::iter::once(format!("conflicts with {m}:")).chain(paths))
            .collect();
        format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
    };
    ApiError::new(409, "Conflict", message)
        .with_details(json!({"name": name, "kind": resource, "causes": causes}))
}
