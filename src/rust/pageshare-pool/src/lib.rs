//! pageshare-pool: pageshare's worker pool without R.
//!
//! Tasks and results travel between a master and its worker processes on
//! shared-memory rings; waiting spins briefly and then parks on a futex, so an
//! idle pool burns no CPU; a worker's death is seen by the kernel closing its
//! socket.
//!
//! Modules, one responsibility each:
//! - [`wait`]: spin, then park on a doorbell (a futex word) in bounded slices;
//! - [`ring`]: a single-producer single-consumer ring of messages;
//! - [`region`]: the shared memory file holding every slot's rings;
//! - [`handshake`]: how a worker proves it is one the master started;
//! - [`pool`]: the master's side: start, admit, watch, replace and stop workers;
//! - [`dispatch`]: the master's bookkeeping of which worker has which message;
//! - [`master`]: the master's state machine: sending, waits and their events;
//! - [`worker`]: the worker's side: connect, and die with the master;
//! - [`map_plan`]: how a map's elements are cut into chunks for the workers;
//! - [`rng`]: the random-number stream of each element of a map;
//! - [`wire`]: every code of the pool's messages and events, their versions,
//!   and the encoding of frame and message headers.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod dispatch;
pub mod handshake;
pub mod map_plan;
pub mod master;
pub mod pool;
pub mod region;
pub mod ring;
pub mod rng;
pub mod wait;
pub mod wire;
pub mod worker;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_master;
#[cfg(test)]
mod tests_process;
