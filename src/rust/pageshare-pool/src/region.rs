//! The pool's shared memory: one memory file (memfd) that the master creates
//! and passes to every worker over its socket. It holds a header, the master's
//! doorbell (where the master waits for results from any worker), and for each
//! worker slot a task ring (master to worker), a result ring (worker to master)
//! and the worker's doorbell. Its size is sealed, so no process can make
//! another fault by shrinking it.
//!
//! Where memfd_create() is refused (a container's seccomp profile), the region
//! is an unnamed file of this user instead (`os::unnamed_file`: in /dev/shm,
//! else in a temporary directory), passed the same way. Its size cannot be
//! sealed, but no process can open it by name: only the master and the workers
//! it admitted hold it. The pool then runs as usual; only the segments of
//! large values cannot be made, and those go as plain data (the R side warns).

use crate::ring::{Ring, RingControl};
use crate::wait::Doorbell;
use memmap2::MmapMut;
use pageshare_core::os;
use std::fs::File;
use std::path::PathBuf;

const MAGIC: u64 = 0x7073_706f_6f6c_0001; // "pspool" + version 1
const HEADER_BYTES: u64 = 4096;

#[repr(C)]
struct Header {
    magic: u64,
    slots: u64,
    capacity: u64,
    _pad: [u64; 5],
    master_bell: Doorbell,
}

#[repr(C)]
struct Slot {
    tasks: RingControl,
    results: RingControl,
    worker_bell: Doorbell,
}

/// A mapping of the pool's region.
pub struct Region {
    map: MmapMut,
    file: File,
    slots: u64,
    capacity: u64,
}

fn layout(slots: u64, capacity: u64) -> Option<(u64, u64)> {
    let controls = slots.checked_mul(std::mem::size_of::<Slot>() as u64)?;
    let data_start = (HEADER_BYTES.checked_add(controls)?).checked_add(4095)? & !4095;
    let total = data_start.checked_add(slots.checked_mul(capacity)?.checked_mul(2)?)?;
    Some((data_start, total))
}

impl Region {
    /// A new region for `slots` workers with rings of `capacity` bytes (a power
    /// of two, at least 4096) each way.
    /// A memfd when this process may make one, else an unnamed file in the
    /// first of /dev/shm and `fallback_dirs` where one can be made.
    pub fn create(slots: u64, capacity: u64, fallback_dirs: &[PathBuf]) -> std::io::Result<Region> {
        let total = Region::size_of(slots, capacity)?;
        let memfd = match os::memfd("pageshare-pool") {
            Ok(file) => file,
            Err(refused) => {
                let mut why = vec![refused.to_string()];
                let dirs = std::iter::once(PathBuf::from("/dev/shm")).chain(fallback_dirs.iter().cloned());
                for dir in dirs {
                    match Region::create_unnamed(slots, capacity, &dir) {
                        Ok(region) => return Ok(region),
                        Err(e) => why.push(format!("{}: {e}", dir.display())),
                    }
                }
                return Err(std::io::Error::other(why.join("; ")));
            }
        };
        memfd.set_len(total)?;
        os::seal_size(&memfd)?;
        Region::init(memfd, slots, capacity)
    }

    /// A region in an unnamed file in `dir` (see the module's comment).
    pub fn create_unnamed(slots: u64, capacity: u64, dir: &std::path::Path) -> std::io::Result<Region> {
        let total = Region::size_of(slots, capacity)?;
        let file = os::unnamed_file(dir)?;
        file.set_len(total)?;
        Region::init(file, slots, capacity)
    }

    fn size_of(slots: u64, capacity: u64) -> std::io::Result<u64> {
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
        if slots == 0 || !capacity.is_power_of_two() || capacity < 4096 {
            return Err(bad("a pool region needs at least one slot and a power-of-two ring capacity >= 4096"));
        }
        let (_, total) = layout(slots, capacity).ok_or_else(|| bad("a pool region of this size overflows"))?;
        Ok(total)
    }

    /// Maps `file`, of the region's full size, and writes its header.
    fn init(file: File, slots: u64, capacity: u64) -> std::io::Result<Region> {
        // SAFETY: nobody can shrink the file under the mapping: its size is
        // sealed, or it has no name and only our workers get it (see the
        // module's comment); its contents are shared with them, which is why
        // every read of it goes through atomics or checked copies (ring.rs).
        let mut map = unsafe { MmapMut::map_mut(&file)? };
        // SAFETY: the mapping is at least HEADER_BYTES long and page-aligned;
        // a fresh file reads as zeros, a valid state of every field.
        let header = unsafe { &mut *map.as_mut_ptr().cast::<Header>() };
        header.slots = slots;
        header.capacity = capacity;
        header.magic = MAGIC;
        Ok(Region { map, file, slots, capacity })
    }

    /// Maps a region received from the master, after checking that it is one
    /// and that its size covers what its header says.
    pub fn open(file: File) -> std::io::Result<Region> {
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
        if !os::is_size_sealed(&file) && !os::is_unnamed_private(&file) {
            return Err(bad("the pool's region is neither size-sealed nor an unnamed file of this user"));
        }
        let len = file.metadata()?.len();
        if len < HEADER_BYTES {
            return Err(bad("the pool's region is too short"));
        }
        // SAFETY: size-sealed or unnamed (checked above); see `init`.
        let map = unsafe { MmapMut::map_mut(&file)? };
        // SAFETY: the mapping is at least HEADER_BYTES long; the fields are
        // read once here and checked.
        let (magic, slots, capacity) = unsafe {
            let h = map.as_ptr().cast::<Header>();
            (
                std::ptr::read_volatile(&(*h).magic),
                std::ptr::read_volatile(&(*h).slots),
                std::ptr::read_volatile(&(*h).capacity),
            )
        };
        if magic != MAGIC {
            return Err(bad("not a pool region of this version of pageshare"));
        }
        if slots == 0 || !capacity.is_power_of_two() || capacity < 4096 {
            return Err(bad("the pool region's header is damaged"));
        }
        match layout(slots, capacity) {
            Some((_, total)) if total <= map.len() as u64 => Ok(Region { map, file, slots, capacity }),
            _ => Err(bad("the pool region is shorter than its header says")),
        }
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn slots(&self) -> u64 {
        self.slots
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header (checked at open/create) and
        // lives as long as &self.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    fn slot(&self, slot: u64) -> &Slot {
        assert!(slot < self.slots, "pool slot {slot} out of range");
        // SAFETY: slot < slots, and layout() placed `slots` Slot blocks after the
        // header inside the mapping.
        unsafe {
            &*self.map.as_ptr().add((HEADER_BYTES + slot * std::mem::size_of::<Slot>() as u64) as usize).cast::<Slot>()
        }
    }

    fn ring_data(&self, slot: u64, which: u64) -> *mut u8 {
        let (data_start, _) = layout(self.slots, self.capacity).expect("checked at open/create");
        // SAFETY: within the mapping by layout().
        unsafe { self.map.as_ptr().add((data_start + (slot * 2 + which) * self.capacity) as usize) as *mut u8 }
    }

    /// The doorbell the master waits on for results from any worker.
    pub fn master_bell(&self) -> &Doorbell {
        &self.header().master_bell
    }

    /// Slot `slot`'s task ring (the master sends, the worker receives).
    pub fn tasks(&self, slot: u64) -> Ring<'_> {
        let s = self.slot(slot);
        // SAFETY: control, data and doorbell live in this mapping as long as
        // &self; data spans `capacity` bytes (layout). Only the master sends and
        // only the slot's worker receives (the protocol of pool.rs / worker.rs).
        unsafe { Ring::new(&s.tasks, self.ring_data(slot, 0), self.capacity, &s.worker_bell) }
    }

    /// Slot `slot`'s result ring (the worker sends, the master receives).
    pub fn results(&self, slot: u64) -> Ring<'_> {
        let s = self.slot(slot);
        // SAFETY: as in `tasks`; the consumer is the master, which parks on the
        // master's doorbell.
        unsafe { Ring::new(&s.results, self.ring_data(slot, 1), self.capacity, self.master_bell()) }
    }
}
