//! The host memory pool: a table of aligned blocks keyed by buffer id.
//!
//! `in_use_bytes` is the sum of the sizes callers asked for, so it can be
//! compared exactly with the planner's figures. Freed blocks go to a
//! size-class cache (bounded by `cache_limit`) so repeated runs do not pay the
//! system allocator's page faults again; `reserved_bytes` reports live plus cached.
//!
//! A block's contents are unspecified: zeros when it is fresh from the system,
//! a freed buffer's bytes when it comes from the cache (zeroing it again would
//! cost a pass over every intermediate). Kernels write every element of their
//! outputs. `ONYX_CPU_POISON=1` fills every block with `0xFF` bytes instead
//! (NaN floats, -1 integers), so a test run shows any kernel that reads an
//! output element it did not write.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::HashMap;

use onyx_core::ep::{BufferTable, DeviceBuffer, DeviceId, EpError, MemoryStats};

/// Every block is aligned to at least a cache line, enough for any SIMD load.
pub const MIN_ALIGN: usize = 64;

struct Block {
    ptr: *mut u8,
    layout: Layout,
}

/// The pool. Not thread-safe by itself; the provider wraps it in a mutex.
pub struct Storage {
    table: BufferTable<Block>,
    cache: HashMap<(usize, usize), Vec<*mut u8>>,
    cached_bytes: usize,
    cache_limit: usize,
    /// Bytes of the blocks behind live buffers and arenas (their size classes).
    held_bytes: u64,
    limit: u64,
    /// Fill every block with `0xFF` (see the module docs).
    poison: bool,
    /// Bytes copied in by `upload` and out by `download` (see [`MemoryStats`]).
    pub uploaded_bytes: u64,
    /// See `uploaded_bytes`.
    pub downloaded_bytes: u64,
}

// SAFETY: the raw pointers are exclusively owned heap blocks; the provider
// serializes all access to the table through a mutex.
unsafe impl Send for Storage {}

/// Rounds a request up to its size class: 64 bytes below 64 KiB, pages above.
fn size_class(size: usize) -> usize {
    let size = size.max(1);
    if size < 65536 { size.div_ceil(64) * 64 } else { size.div_ceil(4096) * 4096 }
}

impl Storage {
    /// A pool with a byte limit on live buffers and a limit on cached free blocks.
    pub fn new(limit: u64, cache_limit: usize) -> Self {
        Storage {
            table: BufferTable::new(DeviceId::CPU),
            cache: HashMap::new(),
            cached_bytes: 0,
            cache_limit,
            held_bytes: 0,
            limit,
            poison: std::env::var_os("ONYX_CPU_POISON").is_some_and(|v| v != "0"),
            uploaded_bytes: 0,
            downloaded_bytes: 0,
        }
    }

    /// A block of at least `size` bytes (contents unspecified: see the module
    /// docs), after checking the limit against everything live and `size` more.
    fn block(&mut self, size: u64, align: u32) -> Result<Block, EpError> {
        let st = self.table.stats();
        let live = st.in_use_bytes + st.arena_bytes;
        let oom = || EpError::OutOfMemory { requested: size, in_use: live, limit: self.limit };
        if live.checked_add(size).is_none_or(|total| total > self.limit) {
            return Err(oom());
        }
        let capacity = size_class(usize::try_from(size).map_err(|_| oom())?);
        let align = (align as usize).max(MIN_ALIGN).next_power_of_two();
        let layout = Layout::from_size_align(capacity, align).map_err(|_| oom())?;
        let ptr = match self.cache.get_mut(&(capacity, align)).and_then(Vec::pop) {
            Some(p) => {
                self.cached_bytes -= capacity;
                p
            }
            None => {
                // Zeroed, so that every byte a kernel may read is initialized.
                // SAFETY: the layout has a non-zero size (size_class returns >= 64).
                let p = unsafe { alloc_zeroed(layout) };
                if p.is_null() {
                    return Err(oom());
                }
                p
            }
        };
        if self.poison {
            // SAFETY: `p` is a live block of `capacity` bytes owned by this pool.
            unsafe { std::ptr::write_bytes(ptr, 0xFF, capacity) };
        }
        self.held_bytes += capacity as u64;
        Ok(Block { ptr, layout })
    }

    /// Allocates a buffer (contents unspecified: see the module docs).
    pub fn allocate(&mut self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        let block = self.block(size, align)?;
        let align = block.layout.align() as u32;
        Ok(self.table.insert(block, size, align))
    }

    /// Allocates an arena: a block whose ranges are handed out by [`view`](Self::view).
    pub fn allocate_arena(&mut self, size: u64) -> Result<DeviceBuffer, EpError> {
        let block = self.block(size, MIN_ALIGN as u32)?;
        Ok(self.table.insert_arena(block, size, MIN_ALIGN as u32))
    }

    /// A buffer of `size` bytes at `offset` in an arena.
    pub fn view(
        &mut self,
        arena: DeviceBuffer,
        offset: u64,
        size: u64,
    ) -> Result<DeviceBuffer, EpError> {
        let align = 1 << offset.trailing_zeros().min(MIN_ALIGN.trailing_zeros());
        self.table.view(arena, offset, size, align)
    }

    /// Returns a buffer: a block goes to the cache (or the system when the
    /// cache is full); a view only stops counting.
    pub fn deallocate(&mut self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let Some(block) = self.table.remove(buffer)? else { return Ok(()) };
        let capacity = block.layout.size();
        self.held_bytes -= capacity as u64;
        if self.cached_bytes + capacity <= self.cache_limit {
            self.cached_bytes += capacity;
            self.cache.entry((capacity, block.layout.align())).or_default().push(block.ptr);
        } else {
            // SAFETY: the block was allocated with exactly this layout and is no longer in the table.
            unsafe { dealloc(block.ptr, block.layout) };
        }
        Ok(())
    }

    /// The address and size of a live buffer.
    pub fn resolve(&self, buffer: &DeviceBuffer) -> Result<(*mut u8, usize), EpError> {
        let r = self.table.resolve(buffer)?;
        // SAFETY: a view's range lies inside its arena's block (checked when it was made).
        Ok((unsafe { r.mem.ptr.add(r.offset as usize) }, r.size as usize))
    }

    /// Current figures.
    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            reserved_bytes: self.held_bytes + self.cached_bytes as u64,
            uploaded_bytes: self.uploaded_bytes,
            downloaded_bytes: self.downloaded_bytes,
            ..self.table.stats()
        }
    }

    /// Restarts peak tracking.
    pub fn reset_peak(&mut self) {
        self.table.reset_peak();
    }

    /// Returns every cached block to the system.
    pub fn trim(&mut self) {
        for ((capacity, align), ptrs) in self.cache.drain() {
            let layout = Layout::from_size_align(capacity, align).expect("was valid when cached");
            for p in ptrs {
                // SAFETY: cached blocks were allocated with this layout and are owned by the cache.
                unsafe { dealloc(p, layout) };
            }
        }
        self.cached_bytes = 0;
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.trim();
        if !self.table.is_empty() {
            log::warn!(
                "CPU provider dropped with {} buffers ({} bytes) never deallocated",
                self.table.len(),
                self.table.stats().in_use_bytes
            );
        }
        for b in self.table.drain() {
            // SAFETY: live blocks were allocated with their layout; nothing can use them after drop.
            unsafe { dealloc(b.ptr, b.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deallocate_returns_the_bytes_and_rejects_a_second_free() {
        let mut s = Storage::new(u64::MAX, 1 << 20);
        let a = s.allocate(100, 4).unwrap();
        let b = s.allocate(28, 4).unwrap();
        assert_eq!(s.stats().in_use_bytes, 128);
        s.deallocate(a).unwrap();
        assert_eq!(s.stats().in_use_bytes, 28);
        assert_eq!(s.stats().peak_bytes, 128);
        assert!(matches!(s.deallocate(a), Err(EpError::UnknownBuffer { .. })));
        s.deallocate(b).unwrap();
        let st = s.stats();
        assert_eq!((st.allocations, st.frees, st.in_use_bytes), (2, 2, 0));
    }

    #[test]
    fn the_limit_turns_into_out_of_memory() {
        let mut s = Storage::new(1000, 0);
        let a = s.allocate(600, 4).unwrap();
        assert!(matches!(s.allocate(600, 4), Err(EpError::OutOfMemory { .. })));
        s.deallocate(a).unwrap();
        assert!(s.allocate(600, 4).is_ok());
    }

    #[test]
    fn a_freed_block_is_reused_from_the_cache_and_a_fresh_one_is_zeroed() {
        let mut s = Storage::new(u64::MAX, 1 << 20);
        s.poison = false;
        let a = s.allocate(64, 4).unwrap();
        let (p, _) = s.resolve(&a).unwrap();
        // SAFETY: p points to 64 live bytes.
        assert!(unsafe { std::slice::from_raw_parts(p, 64) }.iter().all(|&x| x == 0));
        s.deallocate(a).unwrap();
        let b = s.allocate(64, 4).unwrap();
        let (q, _) = s.resolve(&b).unwrap();
        assert_eq!(p, q);
        assert_eq!(s.stats().reserved_bytes, 64);
    }

    #[test]
    fn views_of_an_arena_resolve_inside_it_and_count_in_use() {
        let mut s = Storage::new(u64::MAX, 1 << 20);
        let arena = s.allocate_arena(4096).unwrap();
        let a = s.view(arena, 0, 1000).unwrap();
        let b = s.view(arena, 1024, 2000).unwrap();
        let (base, _) = s.resolve(&a).unwrap();
        let (p, len) = s.resolve(&b).unwrap();
        assert_eq!((p as usize - base as usize, len), (1024, 2000));
        let st = s.stats();
        assert_eq!((st.in_use_bytes, st.arena_bytes), (3000, 4096));
        s.deallocate(a).unwrap();
        s.deallocate(b).unwrap();
        s.deallocate(arena).unwrap();
        let st = s.stats();
        assert_eq!((st.in_use_bytes, st.arena_bytes, st.peak_bytes), (0, 0, 3000));
    }

    #[test]
    fn poisoning_fills_every_block_with_ones() {
        let mut s = Storage::new(u64::MAX, 1 << 20);
        s.poison = true;
        let a = s.allocate(64, 4).unwrap();
        let (p, _) = s.resolve(&a).unwrap();
        // SAFETY: p points to 64 live bytes.
        assert!(unsafe { std::slice::from_raw_parts(p, 64) }.iter().all(|&x| x == 0xFF));
    }
}
