//! Errors of the core, each with a message fit for an R user: what failed, on
//! which segment, and what to do.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// Not enough free space in the segment directory.
    NoSpace { dir: String, needed: u64, free: u64 },
    /// The segment does not exist (released, or its owner exited).
    Missing { name: String, dir: String },
    /// A namespace/variable pair is already held by another live process.
    Taken { namespace: String, variable: String, holder_pid: u32 },
    /// The file is not a pageshare segment of this format, or is truncated.
    Invalid { name: String, why: String },
    /// Bad argument from the caller.
    Argument(String),
    /// Any other OS failure, with the call that failed.
    Os { what: String, source: std::io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSpace { dir, needed, free } => write!(
                f,
                "not enough shared memory: the segment needs {} but {} has {} free; \
                 free space there or point `options(pageshare.dir=)` at a larger tmpfs",
                human_bytes(*needed),
                dir,
                human_bytes(*free)
            ),
            Error::Missing { name, dir } => write!(
                f,
                "shared segment '{name}' does not exist in {dir}: its owner released it or \
                 exited; share the object again in the owning session"
            ),
            Error::Taken { namespace, variable, holder_pid } => write!(
                f,
                "variable '{variable}' in namespace '{namespace}' is already registered by \
                 process {holder_pid}; release it there (`releaseVariables()`) or use another name"
            ),
            Error::Invalid { name, why } => {
                write!(f, "'{name}' is not a valid pageshare segment: {why}")
            }
            Error::Argument(msg) => write!(f, "{msg}"),
            Error::Os { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    pub fn os(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Os { what: what.into(), source }
    }
}
