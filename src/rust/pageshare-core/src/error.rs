//! Errors of the core, each with a message fit for an R user: what failed, on
//! which segment, and what to do.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// Not enough memory for a segment.
    NoSpace { needed: u64, free: u64 },
    /// The segment does not exist any more (released, or its owner exited).
    Missing { name: String },
    /// The segment would take this process past `pageshare.max_shared_bytes`.
    OverBudget { needed: u64, held: u64, budget: u64 },
    /// This process is too close to its limit on open files to hold one more
    /// segment's descriptor.
    Descriptors { limit: u64 },
    /// A file or directory pageshare must trust is not safe to use (another
    /// owner, a link, a FIFO, open to other users).
    Unsafe { path: String, why: String },
    /// A namespace/variable pair is already held by another live process.
    Taken { namespace: String, variable: String, holder_pid: u32 },
    /// A registered name whose holder is alive (its index entry is locked) but
    /// whose segment this process cannot open: the holder runs in another PID
    /// namespace, or does not let this process read its descriptors (or it
    /// exited and a child it forked still holds the entry's lock).
    Unreachable { name: String, holder_pid: u32 },
    /// The file is not a pageshare segment of this format, or is truncated.
    Invalid { name: String, why: String },
    /// This environment cannot pass segments between processes (see
    /// [`crate::os::check_segments_openable`]).
    Unsupported { why: String },
    /// Bad argument from the caller.
    Argument(String),
    /// Any other OS failure, with the call that failed.
    Os { what: String, source: std::io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
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
            Error::NoSpace { needed, free } => write!(
                f,
                "not enough shared memory: the segment needs {} but only {} of memory is \
                 available (the machine's MemAvailable, or this process's cgroup limit); \
                 free memory or share less",
                human_bytes(*needed),
                human_bytes(*free)
            ),
            Error::Missing { name } => write!(
                f,
                "shared segment '{name}' does not exist any more: its owner released it or \
                 exited; share the object again in the owning session"
            ),
            Error::OverBudget { needed, held, budget } => write!(
                f,
                "not enough shared memory allowed: the segment needs {} and this session holds {} \
                 in segments, of the {} that option `pageshare.max_shared_bytes` allows; raise the \
                 option or release shared objects",
                human_bytes(*needed),
                human_bytes(*held),
                human_bytes(*budget)
            ),
            Error::Descriptors { limit } => write!(
                f,
                "too many shared segments: this process may open {limit} files (`ulimit -n`) \
                 and holds one per segment; release some (`releaseVariables()`, or `rm()` \
                 views and `gc()`), share fewer, larger objects, or raise the hard limit"
            ),
            Error::Unsafe { path, why } => write!(
                f,
                "pageshare will not use {path}: {why}; remove it, or set `options(pageshare.dir=)` \
                 to a directory of your own"
            ),
            Error::Taken { namespace, variable, holder_pid } => write!(
                f,
                "variable '{variable}' in namespace '{namespace}' is already registered by \
                 process {holder_pid}; release it there (`releaseVariables()`) or use another name"
            ),
            Error::Unreachable { name, holder_pid } => {
                let what = match crate::naming::parse_named(name) {
                    Some((ns, var)) => format!("variable '{var}' in namespace '{ns}'"),
                    None => format!("segment '{name}'"),
                };
                write!(
                    f,
                    "{what} is registered by a live process (pid {holder_pid} where it runs) whose segment \
                     this process cannot open: it runs in another PID namespace (a container sharing \
                     the index directory), does not let this process read its descriptors, or exited \
                     while a process it forked still runs; retrieve it from a process that can see the \
                     holder"
                )
            }
            Error::Invalid { name, why } => {
                write!(f, "'{name}' is not a valid pageshare segment: {why}")
            }
            Error::Unsupported { why } => write!(
                f,
                "pageshare cannot share here: {why}. Mount /proc (the default in containers), \
                 or use plain serialization (the parallel backends fall back to it by themselves)"
            ),
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

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn sizes_are_in_iec_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(16_000_000), "15.3 MiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
