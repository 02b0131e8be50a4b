//! Authentication of control envelopes: HMAC-SHA256 with a per-tenant key,
//! a timestamp window and a replay cache of nonces. Sans-IO: the caller
//! passes the wall-clock time it read.

use crate::wire::Envelope;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Why an envelope is refused (answered `UNAUTHORIZED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no key is configured for tenant {0}")]
    UnknownTenant(u16),
    #[error("the MAC does not verify")]
    BadMac,
    #[error("timestamp {ts} ms is {skew} ms away from the node's clock (window {window} ms)")]
    Stale { ts: u64, skew: u64, window: u64 },
    #[error("nonce {0} was already used within the replay window")]
    Replayed(u64),
}

/// The per-tenant keys and the replay state.
#[derive(Debug, Clone)]
pub struct Authenticator {
    keys: HashMap<u16, Vec<u8>>,
    window_ms: u64,
    /// (tenant, nonce) seen with a timestamp still inside the window.
    seen: BTreeSet<(u16, u64)>,
    /// The same, oldest timestamp first, to forget them.
    order: VecDeque<(u64, u16, u64)>,
}

impl Authenticator {
    /// `window_ms`: how far a timestamp may be from the node's clock, either
    /// way. A nonce is remembered for twice that, so a replay inside the
    /// window is always caught and memory stays bounded by the request rate.
    pub fn new(keys: HashMap<u16, Vec<u8>>, window_ms: u64) -> Authenticator {
        Authenticator {
            keys,
            window_ms,
            seen: BTreeSet::new(),
            order: VecDeque::new(),
        }
    }

    pub fn has_keys(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Check `env` (decoded from `payload`) at wall-clock time `now_ms`.
    /// On success its nonce is spent.
    pub fn verify(&mut self, now_ms: u64, env: &Envelope, payload: &[u8]) -> Result<(), AuthError> {
        let key = self
            .keys
            .get(&env.tenant)
            .ok_or(AuthError::UnknownTenant(env.tenant))?;
        if !env.mac_ok(payload, key) {
            return Err(AuthError::BadMac);
        }
        let skew = now_ms.abs_diff(env.timestamp_ms);
        if skew > self.window_ms {
            return Err(AuthError::Stale {
                ts: env.timestamp_ms,
                skew,
                window: self.window_ms,
            });
        }
        self.forget(now_ms);
        if !self.seen.insert((env.tenant, env.nonce)) {
            return Err(AuthError::Replayed(env.nonce));
        }
        self.order
            .push_back((env.timestamp_ms, env.tenant, env.nonce));
        Ok(())
    }

    /// Nonces remembered now.
    pub fn remembered(&self) -> usize {
        self.seen.len()
    }

    fn forget(&mut self, now_ms: u64) {
        // Timestamps arrive roughly in order; a late one only stays longer.
        while let Some(&(ts, tenant, nonce)) = self.order.front() {
            if ts + 2 * self.window_ms >= now_ms {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&(tenant, nonce));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{encode, Op};

    fn auth() -> Authenticator {
        Authenticator::new(
            HashMap::from([(1, b"alpha".to_vec()), (2, b"beta".to_vec())]),
            30_000,
        )
    }

    fn check(a: &mut Authenticator, now: u64, b: &[u8]) -> Result<(), AuthError> {
        a.verify(now, &Envelope::decode(b).unwrap(), b)
    }

    #[test]
    fn good_request_passes_once_and_its_replay_is_refused() {
        let mut a = auth();
        let b = encode(1, 1_000_000, 7, &Op::List, b"alpha");
        assert_eq!(check(&mut a, 1_000_010, &b), Ok(()));
        assert_eq!(check(&mut a, 1_000_020, &b), Err(AuthError::Replayed(7)));
        // Another tenant may use the same nonce.
        let c = encode(2, 1_000_000, 7, &Op::List, b"beta");
        assert_eq!(check(&mut a, 1_000_020, &c), Ok(()));
    }

    #[test]
    fn wrong_key_unknown_tenant_and_stale_are_refused() {
        let mut a = auth();
        let b = encode(1, 1_000_000, 1, &Op::List, b"beta");
        assert_eq!(check(&mut a, 1_000_000, &b), Err(AuthError::BadMac));
        let b = encode(9, 1_000_000, 1, &Op::List, b"alpha");
        assert_eq!(
            check(&mut a, 1_000_000, &b),
            Err(AuthError::UnknownTenant(9))
        );
        let b = encode(1, 1_000_000, 1, &Op::List, b"alpha");
        assert!(matches!(
            check(&mut a, 1_030_001, &b),
            Err(AuthError::Stale { .. })
        ));
        assert!(matches!(
            check(&mut a, 969_999, &b),
            Err(AuthError::Stale { .. })
        ));
        // A refused request spends no nonce.
        assert_eq!(check(&mut a, 1_000_000, &b), Ok(()));
    }

    #[test]
    fn a_replay_after_the_window_is_stale_and_memory_is_bounded() {
        let mut a = auth();
        for i in 0..1000u64 {
            let b = encode(1, 1_000_000 + i * 100, i, &Op::List, b"alpha");
            assert_eq!(check(&mut a, 1_000_000 + i * 100, &b), Ok(()));
        }
        // 100 s of requests at 10/s, remembered for 60 s.
        assert!(a.remembered() <= 601, "{}", a.remembered());
        let old = encode(1, 1_000_000, 0, &Op::List, b"alpha");
        assert!(matches!(
            check(&mut a, 1_100_000, &old),
            Err(AuthError::Stale { .. })
        ));
    }
}
