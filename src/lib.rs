//! ckpt: checkpoints of a working directory before every agent mutation, restorable exactly,
//! without ever touching the user's own git state.
//!
//! `verbs` is the only door into a repository; `provider` runs the snapshot and restore
//! transactions through it; `records` keeps the checkpoint registry; `cli` is the command line.

pub mod cli;
pub mod fault;
pub mod provider;
pub mod records;
pub mod verbs;
