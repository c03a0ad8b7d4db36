//! The buffer table every provider keeps: memory objects keyed by the plain
//! [`DeviceBuffer`] id, views into arenas, and the memory statistics, written
//! once for the CPU, wgpu and CUDA backends.
//!
//! A provider stores its own memory object type `M` (a host block, a
//! `wgpu::Buffer`, a `CudaSlice`); the table does the bookkeeping that is the
//! same everywhere:
//!
//! - [`insert`](BufferTable::insert) records an ordinary buffer: its bytes
//!   count in [`MemoryStats::in_use_bytes`].
//! - [`insert_arena`](BufferTable::insert_arena) records an arena, one block
//!   that a run's intermediates are placed in at planned offsets: its bytes
//!   count in [`MemoryStats::arena_bytes`], not in use.
//! - [`view`](BufferTable::view) hands out a buffer that is a range of an
//!   arena: its bytes count in use from now until its
//!   [`remove`](BufferTable::remove), exactly as an ordinary buffer's would,
//!   so the measured peak stays the live set while the memory really held is
//!   the arena.
//! - [`remove`](BufferTable::remove) is the only way out: it returns the
//!   memory object of an ordinary buffer or an arena (which must have no live
//!   views) for the provider to free or pool, and nothing for a view.

use std::collections::HashMap;

use super::error::EpError;
use super::types::{DeviceBuffer, DeviceId, MemoryStats};

/// What an id resolves to: the memory object, and where in it the buffer starts.
#[derive(Debug)]
pub struct Resolved<'a, M> {
    /// The memory object (an arena's, for a view).
    pub mem: &'a M,
    /// Byte offset of the buffer in `mem`.
    pub offset: u64,
    /// The buffer's size in bytes, as requested.
    pub size: u64,
}

enum Kind<M> {
    Memory { mem: M, arena: bool, views: u32 },
    View { arena: u64, offset: u64 },
}

struct Entry<M> {
    size: u64,
    kind: Kind<M>,
}

/// A provider's buffers and their statistics (see the module docs).
pub struct BufferTable<M> {
    device: DeviceId,
    entries: HashMap<u64, Entry<M>>,
    next_id: u64,
    stats: MemoryStats,
}

impl<M> BufferTable<M> {
    /// An empty table for the buffers of `device`.
    pub fn new(device: DeviceId) -> Self {
        BufferTable { device, entries: HashMap::new(), next_id: 1, stats: MemoryStats::default() }
    }

    fn handle(&mut self, size: u64, align: u32, entry: Entry<M>) -> DeviceBuffer {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(id, entry);
        DeviceBuffer { device: self.device, id, size, align }
    }

    fn count_in_use(&mut self, size: u64) {
        self.stats.in_use_bytes += size;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.in_use_bytes);
        self.stats.allocations += 1;
    }

    /// Records an ordinary buffer of `size` bytes held in `mem`.
    pub fn insert(&mut self, mem: M, size: u64, align: u32) -> DeviceBuffer {
        self.count_in_use(size);
        self.handle(size, align, Entry { size, kind: Kind::Memory { mem, arena: false, views: 0 } })
    }

    /// Records an arena of `size` bytes held in `mem`.
    pub fn insert_arena(&mut self, mem: M, size: u64, align: u32) -> DeviceBuffer {
        self.stats.arena_bytes += size;
        self.stats.arena_peak_bytes = self.stats.arena_peak_bytes.max(self.stats.arena_bytes);
        self.handle(size, align, Entry { size, kind: Kind::Memory { mem, arena: true, views: 0 } })
    }

    /// A buffer of `size` bytes at `offset` in `arena`.
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`] when `arena` is not a live arena of this
    /// table, [`EpError::OutOfBounds`] when the range runs past its end.
    pub fn view(
        &mut self,
        arena: DeviceBuffer,
        offset: u64,
        size: u64,
        align: u32,
    ) -> Result<DeviceBuffer, EpError> {
        let unknown = EpError::UnknownBuffer { id: arena.id, device: arena.device };
        if arena.device != self.device {
            return Err(unknown);
        }
        match self.entries.get_mut(&arena.id) {
            Some(Entry { size: arena_size, kind: Kind::Memory { arena: true, views, .. } })
                if *arena_size == arena.size =>
            {
                if offset.checked_add(size).is_none_or(|end| end > *arena_size) {
                    return Err(EpError::OutOfBounds { offset, len: size, size: *arena_size });
                }
                *views += 1;
            }
            _ => return Err(unknown),
        }
        self.count_in_use(size);
        Ok(self.handle(size, align, Entry { size, kind: Kind::View { arena: arena.id, offset } }))
    }

    /// Takes a buffer out of the table. Returns its memory object for an
    /// ordinary buffer or an arena, `None` for a view (whose memory stays
    /// the arena's).
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`] for a handle this table does not hold (never
    /// inserted, already removed, or another size), and for an arena that
    /// still has live views.
    pub fn remove(&mut self, buffer: DeviceBuffer) -> Result<Option<M>, EpError> {
        let unknown = || EpError::UnknownBuffer { id: buffer.id, device: buffer.device };
        match self.entries.get(&buffer.id) {
            Some(e) if buffer.device == self.device && e.size == buffer.size => {
                if let Kind::Memory { views, .. } = e.kind {
                    if views > 0 {
                        return Err(EpError::Kernel(format!(
                            "arena {} on {} freed with {views} live views",
                            buffer.id, self.device
                        )));
                    }
                }
            }
            _ => return Err(unknown()),
        }
        let e = self.entries.remove(&buffer.id).ok_or_else(unknown)?;
        match e.kind {
            Kind::Memory { mem, arena: true, .. } => {
                self.stats.arena_bytes -= e.size;
                Ok(Some(mem))
            }
            Kind::Memory { mem, .. } => {
                self.stats.in_use_bytes -= e.size;
                self.stats.frees += 1;
                Ok(Some(mem))
            }
            Kind::View { arena, .. } => {
                if let Some(Entry { kind: Kind::Memory { views, .. }, .. }) =
                    self.entries.get_mut(&arena)
                {
                    *views -= 1;
                }
                self.stats.in_use_bytes -= e.size;
                self.stats.frees += 1;
                Ok(None)
            }
        }
    }

    /// The memory object and offset behind a live buffer.
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`] for a handle this table does not hold.
    pub fn resolve(&self, buffer: &DeviceBuffer) -> Result<Resolved<'_, M>, EpError> {
        let unknown = || EpError::UnknownBuffer { id: buffer.id, device: buffer.device };
        let e = match self.entries.get(&buffer.id) {
            Some(e) if buffer.device == self.device && e.size == buffer.size => e,
            _ => return Err(unknown()),
        };
        match &e.kind {
            Kind::Memory { mem, .. } => Ok(Resolved { mem, offset: 0, size: e.size }),
            Kind::View { arena, offset } => match self.entries.get(arena).map(|a| &a.kind) {
                Some(Kind::Memory { mem, .. }) => {
                    Ok(Resolved { mem, offset: *offset, size: e.size })
                }
                _ => Err(unknown()),
            },
        }
    }

    /// The table's statistics (`reserved_bytes` is the provider's to fill in).
    pub fn stats(&self) -> MemoryStats {
        self.stats
    }

    /// Restarts peak tracking from the bytes in use now.
    pub fn reset_peak(&mut self) {
        self.stats.peak_bytes = self.stats.in_use_bytes;
        self.stats.arena_peak_bytes = self.stats.arena_bytes;
    }

    /// Live entries (buffers, arenas and views).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is live.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes every memory object out (for a provider being dropped), views first forgotten.
    pub fn drain(&mut self) -> Vec<M> {
        let mems = self
            .entries
            .drain()
            .filter_map(|(_, e)| match e.kind {
                Kind::Memory { mem, .. } => Some(mem),
                Kind::View { .. } => None,
            })
            .collect();
        self.stats.in_use_bytes = 0;
        self.stats.arena_bytes = 0;
        mems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_counts_in_use_until_removed_and_the_arena_counts_apart() {
        let mut t: BufferTable<&str> = BufferTable::new(DeviceId::CPU);
        let arena = t.insert_arena("block", 1024, 64);
        assert_eq!((t.stats().in_use_bytes, t.stats().arena_bytes), (0, 1024));
        let a = t.view(arena, 0, 256, 4).unwrap();
        let b = t.view(arena, 512, 100, 4).unwrap();
        assert_eq!(t.stats().in_use_bytes, 356);
        let r = t.resolve(&b).unwrap();
        assert_eq!((*r.mem, r.offset, r.size), ("block", 512, 100));
        assert_eq!(t.remove(a).unwrap(), None);
        assert_eq!(t.stats().in_use_bytes, 100);
        assert_eq!(t.stats().peak_bytes, 356);
        // Not while a view is live.
        assert!(t.remove(arena).is_err());
        t.remove(b).unwrap();
        assert_eq!(t.remove(arena).unwrap(), Some("block"));
        assert_eq!((t.stats().in_use_bytes, t.stats().arena_bytes), (0, 0));
        assert_eq!(t.stats().arena_peak_bytes, 1024);
    }

    #[test]
    fn a_view_past_the_arena_or_of_an_ordinary_buffer_is_refused() {
        let mut t: BufferTable<u8> = BufferTable::new(DeviceId::CPU);
        let arena = t.insert_arena(0, 100, 4);
        assert!(matches!(t.view(arena, 96, 8, 4), Err(EpError::OutOfBounds { .. })));
        let plain = t.insert(1, 100, 4);
        assert!(matches!(t.view(plain, 0, 8, 4), Err(EpError::UnknownBuffer { .. })));
    }

    #[test]
    fn removing_twice_or_with_another_size_is_an_unknown_buffer() {
        let mut t: BufferTable<u8> = BufferTable::new(DeviceId::CPU);
        let b = t.insert(7, 64, 4);
        assert!(t.remove(DeviceBuffer { size: 65, ..b }).is_err());
        assert_eq!(t.remove(b).unwrap(), Some(7));
        assert!(matches!(t.remove(b), Err(EpError::UnknownBuffer { .. })));
        let s = t.stats();
        assert_eq!((s.allocations, s.frees, s.in_use_bytes), (1, 1, 0));
    }
}
