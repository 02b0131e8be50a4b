//! Signed control requests (`docs/control.md`): the envelope's clock and a
//! control client of one tenant.

use offrac_client::{Client, ClientError, Reply, RetryPolicy};
use offrac_control::examples::compile_wat;
use offrac_control::{wire, Op, FN_CONTROL};
use offrac_node::NodeHandle;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The nonces of [`envelope`]: one count for the whole test crate, so no two
/// envelopes of a tenant share one.
static NONCE: AtomicU64 = AtomicU64::new(1);

/// Milliseconds since the Unix epoch, as a control envelope carries them.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `op` signed by `tenant` with `key`, now, under the crate's next nonce.
pub fn envelope(tenant: u16, key: &[u8], op: &Op) -> Vec<u8> {
    wire::encode(
        tenant,
        now_ms(),
        NONCE.fetch_add(1, Ordering::Relaxed),
        op,
        key,
    )
}

/// A connection sending control requests signed by `tenant` with `key`, its
/// nonces counting up from `nonce` (a tenant's nonces are never reused).
pub struct Ctl {
    pub c: Client,
    pub tenant: u16,
    pub key: Vec<u8>,
    pub nonce: u64,
}

impl Ctl {
    pub fn new(n: &NodeHandle, tenant: u16, key: &[u8], nonce: u64) -> Ctl {
        let c = Client::connect(&n.addr.to_string())
            .unwrap()
            .with_retry_policy(RetryPolicy::with_max_retries(0));
        Ctl {
            c,
            tenant,
            key: key.to_vec(),
            nonce,
        }
    }

    pub fn send(&mut self, op: &Op) -> Result<Reply, ClientError> {
        self.nonce += 1;
        let env = wire::encode(self.tenant, now_ms(), self.nonce, op, &self.key);
        self.c.call(FN_CONTROL, 0, &env)
    }

    /// The answer's JSON (panics on a refusal).
    pub fn json(&mut self, op: &Op) -> serde_json::Value {
        serde_json::from_slice(&self.send(op).expect("control request").payload)
            .expect("JSON answer")
    }

    /// Uploads the module of `wat`; its digest.
    pub fn upload(&mut self, wat: &str) -> [u8; 32] {
        let v = self.json(&Op::Upload(compile_wat(wat).unwrap()));
        hex::decode(v["digest"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap()
    }
}
