//! How shardgate marks what it applies: the field manager of its
//! server-side applies, and the annotation holding the hash of what it
//! applied. Apply writes both; the cache reads them back.

/// shardgate's field manager.
pub const FIELD_MANAGER: &str = "shardgate";
/// The annotation holding the hash of what shardgate last applied.
pub const APPLIED_HASH: &str = "shardgate.io/applied-hash";
