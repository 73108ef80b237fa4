//! A counting semaphore whose size can change while permits are out: the global cap on
//! children and each client's command slots, both resized by a configuration reload.
//!
//! Growing adds permits at once. Shrinking takes back the idle ones; the rest are a debt
//! that running holders pay as they finish (their permit is forgotten instead of
//! returned), so the number running never exceeds the new size for longer than the
//! runs that were already going.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// A resizable semaphore; clones share it.
#[derive(Clone)]
pub struct Permits {
    inner: Arc<Inner>,
}

struct Inner {
    sem: Arc<Semaphore>,
    // A std mutex: held for a few integer operations, never across an await.
    size: Mutex<Size>,
}

#[derive(Debug, Clone, Copy)]
struct Size {
    /// What the size is now.
    target: usize,
    /// Permits held now beyond `target`: taken back as their holders finish.
    debt: usize,
}

/// One held permit; returned (or, while the size is paying a debt, retired) on drop.
pub struct Permit {
    permit: Option<OwnedSemaphorePermit>,
    inner: Arc<Inner>,
}

impl Permits {
    /// `size` permits.
    pub fn new(size: usize) -> Self {
        Permits {
            inner: Arc::new(Inner {
                sem: Arc::new(Semaphore::new(size)),
                size: Mutex::new(Size {
                    target: size,
                    debt: 0,
                }),
            }),
        }
    }

    /// The size in force.
    pub fn size(&self) -> usize {
        self.inner.size().target
    }

    /// A permit now, or `None` when all are out.
    pub fn try_acquire(&self) -> Option<Permit> {
        let permit = self.inner.sem.clone().try_acquire_owned().ok()?;
        Some(self.wrap(permit))
    }

    /// Waits for a permit; `Err` once [`Permits::close`] was called.
    pub async fn acquire(&self) -> Result<Permit, AcquireError> {
        let permit = self.inner.sem.clone().acquire_owned().await?;
        Ok(self.wrap(permit))
    }

    /// Ends every wait with an error; no permit is handed out after this.
    pub fn close(&self) {
        self.inner.sem.close();
    }

    /// Changes the size. Held permits stay valid; see the module documentation.
    pub fn resize(&self, new: usize) {
        let mut size = self.inner.size();
        if new >= size.target {
            let grow = new - size.target;
            let paid = grow.min(size.debt);
            size.debt -= paid;
            self.inner.sem.add_permits(grow - paid);
        } else {
            let shrink = size.target - new;
            let idle = self.inner.sem.forget_permits(shrink);
            size.debt += shrink - idle;
        }
        size.target = new;
    }

    fn wrap(&self, permit: OwnedSemaphorePermit) -> Permit {
        Permit {
            permit: Some(permit),
            inner: self.inner.clone(),
        }
    }
}

impl Inner {
    fn size(&self) -> MutexGuard<'_, Size> {
        self.size.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let mut size = self.inner.size();
        if size.debt > 0 {
            size.debt -= 1;
            permit.forget();
        }
        // Otherwise `permit` drops here, under the lock, so a resize sees it returned.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_below_the_held_permits_waits_for_them_to_finish() {
        let p = Permits::new(3);
        let a = p.try_acquire().expect("a");
        let b = p.try_acquire().expect("b");
        p.resize(1);
        assert!(p.try_acquire().is_none(), "two held, size 1");
        drop(a);
        assert!(p.try_acquire().is_none(), "one held, size 1");
        drop(b);
        let c = p.try_acquire().expect("none held, size 1");
        assert!(p.try_acquire().is_none());
        drop(c);
        assert_eq!(p.size(), 1);
    }

    #[test]
    fn growing_pays_the_debt_first() {
        let p = Permits::new(2);
        let held: Vec<_> = (0..2).map(|_| p.try_acquire().expect("held")).collect();
        p.resize(0);
        p.resize(3);
        let more = p.try_acquire().expect("one more than the two held");
        assert!(p.try_acquire().is_none());
        drop(held);
        drop(more);
        let all: Vec<_> = (0..3).map(|_| p.try_acquire().expect("size 3")).collect();
        assert!(p.try_acquire().is_none());
        drop(all);
    }

    #[tokio::test]
    async fn a_waiter_gets_a_permit_when_the_size_grows() {
        let p = Permits::new(1);
        let held = p.try_acquire().expect("held");
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.acquire().await.is_ok() }
        });
        tokio::task::yield_now().await;
        p.resize(2);
        assert!(waiter.await.expect("join"));
        drop(held);
        p.close();
        assert!(p.acquire().await.is_err());
    }
}
