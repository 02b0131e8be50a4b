//! Wakes the I/O thread only when it is asleep in the kernel, so a busy-polling
//! I/O thread costs the workers no system call per completion.

use std::sync::atomic::{AtomicBool, Ordering};

pub struct IoWaker {
    waker: mio::Waker,
    sleeping: AtomicBool,
}

impl IoWaker {
    pub fn new(waker: mio::Waker) -> IoWaker {
        IoWaker {
            waker,
            sleeping: AtomicBool::new(false),
        }
    }

    /// Called by the I/O thread before it re-checks its inputs and sleeps.
    pub fn going_to_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    pub fn woke_up(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    pub fn wake_if_sleeping(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
    }

    pub fn wake(&self) {
        let _ = self.waker.wake();
    }
}
