//! Integration tests on real repositories made with the real git binary: every ckpt command is
//! checked against a fingerprint of the user's git state, and every restore byte-for-byte.

#[cfg(feature = "real-programs")]
mod agents;
mod badday;
mod clidoc;
mod common;
mod contract;
mod copy;
mod diff;
#[cfg(feature = "fault-injection")]
mod faults;
mod health;
mod hooks;
mod hostile;
#[cfg(feature = "real-programs")]
mod plugin;
mod props;
mod restore;
mod retention;
mod review;
mod safety;
mod sandbox;
mod snapshot;
mod statcache;
mod stress;
mod trace;
mod ui;
mod watch;
