#![warn(missing_docs)]
//! ckpt: checkpoints of a working directory before every agent mutation, restorable exactly,
//! without ever touching the user's own git state.
//!
//! `verbs` is the only door into a repository; `provider` runs the snapshot and restore
//! transactions through it; `records` keeps the checkpoint registry; `cli` is the command line.
//! The binary is the only consumer, so only [`cli`] is public: everything it exports is
//! documented (`missing_docs`), and an item nothing uses shows up as dead code.

pub mod cli;
mod fault;
mod provider;
mod records;
mod verbs;
