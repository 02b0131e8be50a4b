//! The compile thread: uploaded WebAssembly modules are checked, compiled and
//! stored here rather than on the I/O thread, which goes on serving every
//! other connection meanwhile (a large module takes about a second to
//! compile; `docs/control.md`, "Measurements"). The control plane decides
//! what to compile and bounds how many wait ([`crate::control::MAX_COMPILING`]);
//! this thread only runs [`Upload::prepare`] and hands the result back.

use crate::control::Upload;
use crate::wake::IoWaker;
use crossbeam_channel::{Receiver, Sender};
use offrac_control::{LibraryError, Prepared};
use offrac_core::ConnId;
use offrac_proto::RequestHeader;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Who asked for an upload, to answer when it is compiled.
pub struct Asker {
    pub conn: ConnId,
    pub header: RequestHeader,
}

/// A finished compile, for [`crate::control::ControlPlane::finish_upload`].
pub struct Compiled {
    pub asker: Asker,
    pub tenant: u16,
    pub size: usize,
    pub result: Result<Prepared, LibraryError>,
}

pub struct CompileThread {
    tx: Option<Sender<(Asker, Upload)>>,
    rx: Receiver<Compiled>,
    thread: Option<JoinHandle<()>>,
}

impl CompileThread {
    /// Start the thread; it wakes the I/O thread after each compile.
    pub fn spawn(waker: Arc<IoWaker>) -> std::io::Result<CompileThread> {
        let (tx, jobs) = crossbeam_channel::unbounded::<(Asker, Upload)>();
        let (done, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("offrac-compile".into())
            .spawn(move || {
                for (asker, upload) in jobs {
                    // A compiler that panics answers the upload, never strands it.
                    let result =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| upload.prepare()))
                            .unwrap_or_else(|_| {
                                Err(LibraryError::Invalid(
                                    "the compiler failed on this module".into(),
                                ))
                            });
                    let c = Compiled {
                        asker,
                        tenant: upload.tenant,
                        size: upload.size(),
                        result,
                    };
                    if done.send(c).is_err() {
                        return;
                    }
                    waker.wake();
                }
            })?;
        Ok(CompileThread {
            tx: Some(tx),
            rx,
            thread: Some(thread),
        })
    }

    /// Queue `upload`; `false` if the thread is gone.
    pub fn submit(&self, asker: Asker, upload: Upload) -> bool {
        self.tx
            .as_ref()
            .is_some_and(|tx| tx.send((asker, upload)).is_ok())
    }

    /// A finished compile, if any.
    pub fn try_recv(&self) -> Option<Compiled> {
        self.rx.try_recv().ok()
    }

    pub fn has_finished(&self) -> bool {
        !self.rx.is_empty()
    }
}

impl Drop for CompileThread {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the compile it is in (whose
        // module is then stored but never answered: the node is exiting).
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
