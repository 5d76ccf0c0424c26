//! Byte budgets: what bounds the server's memory whatever the client sends or stops reading
//! (docs/protocol.md, "Limits").

use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// A count of bytes held, with a cap that waiting callers respect. One holder may exceed the cap
/// alone (a single answer larger than the whole budget still travels, by itself).
pub struct Budget {
    cap: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

impl Budget {
    pub fn new(cap: u64) -> Arc<Budget> {
        Arc::new(Budget {
            cap,
            used: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `bytes` fit (or nothing else is held), then holds them.
    pub fn acquire(self: &Arc<Budget>, bytes: u64) -> Permit {
        let mut used = self.lock();
        while *used > 0 && used.saturating_add(bytes) > self.cap {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *used += bytes;
        Permit {
            budget: Some(Arc::clone(self)),
            bytes,
        }
    }

    /// Holds `bytes` if they fit now (or nothing else is held); never waits.
    pub fn try_hold(self: &Arc<Budget>, bytes: u64) -> Option<Permit> {
        let mut used = self.lock();
        if *used > 0 && used.saturating_add(bytes) > self.cap {
            return None;
        }
        *used += bytes;
        Some(Permit {
            budget: Some(Arc::clone(self)),
            bytes,
        })
    }

    /// Holds `bytes` at once, over the cap if need be (bytes already in memory).
    pub fn force(self: &Arc<Budget>, bytes: u64) -> Permit {
        *self.lock() += bytes;
        Permit {
            budget: Some(Arc::clone(self)),
            bytes,
        }
    }

    /// Waits until less than the cap is held.
    pub fn wait_room(&self) {
        let mut used = self.lock();
        while *used >= self.cap {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    #[cfg(test)]
    pub fn used(&self) -> u64 {
        *self.lock()
    }
}

/// Bytes held in a budget until dropped.
pub struct Permit {
    budget: Option<Arc<Budget>>,
    bytes: u64,
}

impl Permit {
    /// Holds nothing.
    pub fn none() -> Permit {
        Permit {
            budget: None,
            bytes: 0,
        }
    }

    /// Holds `more` bytes as well, at once (bytes already in memory).
    pub fn grow(&mut self, more: u64) {
        if let Some(budget) = &self.budget {
            *budget.lock() += more;
            self.bytes += more;
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(budget) = self.budget.take() {
            let mut used = budget.lock();
            *used -= self.bytes;
            budget.freed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_wait_for_room_and_a_large_one_goes_alone() {
        let budget = Budget::new(10);
        let a = budget.acquire(6);
        let waiter = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || budget.acquire(6).bytes())
        };
        // It cannot finish while `a` is held.
        assert!(!waiter.is_finished());
        assert_eq!(budget.used(), 6);
        drop(a);
        assert_eq!(waiter.join().unwrap(), 6);
        assert_eq!(budget.used(), 0);
        // Larger than the cap: admitted when nothing else is held.
        let big = budget.acquire(100);
        assert_eq!(big.bytes(), 100);
        let mut forced = budget.force(5);
        forced.grow(3);
        assert_eq!(budget.used(), 108);
        drop((big, forced));
        assert_eq!(budget.used(), 0);
        budget.wait_room();
        assert_eq!(Permit::none().bytes(), 0);
        // try_hold never waits: it holds what fits, and refuses the rest.
        let a = budget.try_hold(8).unwrap();
        assert!(budget.try_hold(3).is_none());
        let b = budget.try_hold(2).unwrap();
        drop((a, b));
        assert_eq!(budget.try_hold(100).map(|p| p.bytes()), Some(100));
    }
}
