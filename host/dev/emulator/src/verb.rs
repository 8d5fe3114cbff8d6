//! Request verbs, as the API server names them.

use std::fmt;

/// The verb of an API request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    /// PUT (replace).
    Update,
    /// PATCH with a merge, JSON or strategic-merge patch.
    Patch,
    /// PATCH with `application/apply-patch+yaml` (server-side apply).
    Apply,
    Delete,
}

impl Verb {
    /// The verb as the API server names it, e.g. `get`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Apply => "apply",
            Verb::Delete => "delete",
        }
    }

    /// Whether the verb changes stored objects (anything but get, list and watch).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Apply | Verb::Delete
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
