//! What shardgate's tests and benches share: the operator against the API
//! emulator ([`harness`]), waiting with deadlines ([`wait`]), proptest
//! strategies for the guest's input ([`strategies`]), a model of what
//! applying a desired state produces ([`apply`]), and the data-path checks
//! against a real Valkey cluster ([`valkey`]).

pub mod apply;
pub mod harness;
pub mod strategies;
pub mod valkey;
pub mod wait;
