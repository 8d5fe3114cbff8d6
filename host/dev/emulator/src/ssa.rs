//! Server-side apply: merging an applied configuration into the live object,
//! detecting conflicts with other managers, and removing fields the applier
//! stopped applying.

use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::fieldset::{
    FieldSet, PathElem, Walk, fields_of, get_path, item_key, path_string, remove_fields,
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
    for p in &members {
        if matches!(p.last(), Some(PathElem::Key(_))) {
            continue;
        }
        if get_path(live_view, p) == get_path(cfg_view, p) {
            continue;
        }
        for (i, e) in entries.iter().enumerate() {
            if e.manager != actor.manager && e.fields.contains(p) {
                conflicts.push((i, p.clone()));
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
    let to_remove = prev.difference(&cfg_set).difference(&others);
    remove_fields(&mut object, &to_remove);

    match mine {
        Some(i) => entries[i].fields = cfg_set,
        None => entries.push(actor.new_entry("Apply", cfg_set)),
    }
    Ok(Applied { object, entries })
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
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(i, p)| {
            json!({
                "type": "FieldManagerConflict",
                "message": format!("conflict with \"{}\"", entries[*i].manager),
                "field": path_string(p),
            })
        })
        .collect();
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(i, p)| {
            format!(
                "- conflict with \"{}\": {}",
                entries[*i].manager,
                path_string(p)
            )
        })
        .collect();
    let n = conflicts.len();
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            lines.join("\n")
        ),
    )
    .with_details(json!({"name": name, "kind": resource, "causes": causes}))
}
