//! Named buffers (`docs/protocol.md`, "Named buffers"): data kept on the
//! node between requests under a 32-bit name, per tenant, within a byte
//! budget for the node and, optionally, one per tenant. Plain state: the
//! engine runs buffer hops against it and the driver's collectives read
//! their input from it and keep their output in it.

use crate::TenantKey;
use bytes::Bytes;
use offrac_proto::Status;
use rustc_hash::FxHashMap;

/// Why a buffer operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    /// Keeping it would pass the node's budget (`detail` = the budget).
    #[error("keeping {len} bytes under buffer {name} would pass the node's budget of {budget} bytes for named buffers ({used} in use)")]
    NodeFull {
        name: u32,
        len: u64,
        used: u64,
        budget: u64,
    },
    /// Keeping it would pass the tenant's budget (`detail` = the budget).
    #[error("keeping {len} bytes under buffer {name} would pass the tenant's budget of {budget} bytes for named buffers ({used} in use)")]
    TenantFull {
        name: u32,
        len: u64,
        used: u64,
        budget: u64,
    },
    /// No buffer of that name (for that tenant).
    #[error("no buffer named {0} on this node")]
    Unknown(u32),
    /// A create named a buffer the tenant already keeps.
    #[error("buffer {0} is already kept on this node")]
    Exists(u32),
}

impl BufferError {
    /// The status's `detail`: the budget passed, or the unknown name.
    pub fn detail(&self) -> u64 {
        match self {
            BufferError::NodeFull { budget, .. } | BufferError::TenantFull { budget, .. } => {
                *budget
            }
            BufferError::Unknown(name) | BufferError::Exists(name) => u64::from(*name),
        }
    }

    /// The answer's status for this refusal.
    pub fn status(&self) -> Status {
        match self {
            BufferError::NodeFull { .. } | BufferError::TenantFull { .. } => Status::QuotaExceeded,
            BufferError::Unknown(_) => Status::UnknownBuffer,
            BufferError::Exists(_) => Status::BufferExists,
        }
    }
}

/// The node's named buffers.
#[derive(Debug, Clone)]
pub struct Buffers {
    /// Shared: a collective's segments and answers may hold slices of a
    /// buffer (`Buffers::get_shared`) while it is kept, none copied.
    kept: FxHashMap<(TenantKey, u32), Bytes>,
    by_tenant: FxHashMap<TenantKey, u64>,
    used: u64,
    budget: u64,
}

/// Default node budget for named buffers: 256 MiB.
pub const DEFAULT_BUFFER_BUDGET: u64 = 256 << 20;

impl Buffers {
    pub fn new(budget: u64) -> Buffers {
        Buffers {
            kept: FxHashMap::default(),
            by_tenant: FxHashMap::default(),
            used: 0,
            budget,
        }
    }

    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes kept, over all tenants.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Buffers kept, over all tenants.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Bytes `tenant` keeps.
    pub fn used_by(&self, tenant: TenantKey) -> u64 {
        self.by_tenant.get(&tenant).copied().unwrap_or(0)
    }

    /// Keep `data` under `name` for `tenant`, replacing a buffer of that
    /// name (whose bytes count as free for the check). `tenant_budget`:
    /// the tenant's own limit, if any. Refused whole: nothing changes.
    pub fn put(
        &mut self,
        tenant: TenantKey,
        name: u32,
        data: impl Into<Bytes>,
        tenant_budget: Option<u64>,
    ) -> Result<(), BufferError> {
        self.replace(tenant, name, data, tenant_budget).map(drop)
    }

    /// [`Buffers::put`] that hands back the buffer it replaced, if any (a
    /// collective's driver gives it to the machine to reuse its memory).
    pub fn replace(
        &mut self,
        tenant: TenantKey,
        name: u32,
        data: impl Into<Bytes>,
        tenant_budget: Option<u64>,
    ) -> Result<Option<Bytes>, BufferError> {
        let data = data.into();
        let len = data.len() as u64;
        let old = self.kept.get(&(tenant, name)).map_or(0, |b| b.len() as u64);
        let used = self.used - old;
        if used + len > self.budget {
            return Err(BufferError::NodeFull {
                name,
                len,
                used,
                budget: self.budget,
            });
        }
        let mine = self.used_by(tenant) - old;
        if let Some(budget) = tenant_budget.filter(|&b| mine + len > b) {
            return Err(BufferError::TenantFull {
                name,
                len,
                used: mine,
                budget,
            });
        }
        let replaced = self.kept.insert((tenant, name), data);
        self.used = used + len;
        self.by_tenant.insert(tenant, mine + len);
        Ok(replaced)
    }

    /// Keep `data` under `name` for `tenant` as [`Buffers::put`] does, but
    /// only if `tenant` keeps no buffer of that name: two clients of one
    /// tenant claiming the same name get one success and one `Exists`.
    pub fn create(
        &mut self,
        tenant: TenantKey,
        name: u32,
        data: impl Into<Bytes>,
        tenant_budget: Option<u64>,
    ) -> Result<(), BufferError> {
        if self.kept.contains_key(&(tenant, name)) {
            return Err(BufferError::Exists(name));
        }
        self.put(tenant, name, data, tenant_budget)
    }

    /// The buffer `name` of `tenant`.
    pub fn get(&self, tenant: TenantKey, name: u32) -> Result<&[u8], BufferError> {
        self.kept
            .get(&(tenant, name))
            .map(|b| &b[..])
            .ok_or(BufferError::Unknown(name))
    }

    /// The buffer `name` of `tenant`, shared (not copied): the buffer may
    /// be replaced or removed meanwhile, the bytes handed out stay.
    pub fn get_shared(&self, tenant: TenantKey, name: u32) -> Result<Bytes, BufferError> {
        self.kept
            .get(&(tenant, name))
            .cloned()
            .ok_or(BufferError::Unknown(name))
    }

    /// Remove the buffer `name` of `tenant`; its bytes are free again.
    pub fn remove(&mut self, tenant: TenantKey, name: u32) -> Result<Bytes, BufferError> {
        let data = self
            .kept
            .remove(&(tenant, name))
            .ok_or(BufferError::Unknown(name))?;
        let len = data.len() as u64;
        self.used -= len;
        let mine = self.used_by(tenant) - len;
        if mine == 0 && !self.kept.keys().any(|(t, _)| *t == tenant) {
            self.by_tenant.remove(&tenant);
        } else {
            self.by_tenant.insert(tenant, mine);
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_hold_and_replacing_frees_the_old_bytes() {
        let mut b = Buffers::new(100);
        b.put(None, 1, vec![1; 60], None).unwrap();
        assert_eq!(
            b.put(None, 2, vec![2; 41], None),
            Err(BufferError::NodeFull {
                name: 2,
                len: 41,
                used: 60,
                budget: 100
            })
        );
        // Replacing buffer 1 counts its 60 bytes as free.
        b.put(None, 1, vec![3; 100], None).unwrap();
        assert_eq!(b.used(), 100);
        // `replace` hands the replaced buffer back.
        let old = b.replace(None, 1, vec![4; 100], None).unwrap();
        assert_eq!(old.as_deref(), Some(&[3; 100][..]));
        assert_eq!(b.replace(None, 7, vec![5; 0], None).unwrap(), None);
        assert_eq!(b.remove(None, 7).unwrap().len(), 0);
        assert_eq!(b.used(), 100);
        assert_eq!(b.get(None, 1).unwrap(), &[4; 100][..]);
        assert_eq!(b.remove(None, 1).unwrap().len(), 100);
        assert_eq!((b.used(), b.len(), b.used_by(None)), (0, 0, 0));
        assert_eq!(b.get(None, 1), Err(BufferError::Unknown(1)));
        assert_eq!(b.remove(None, 1), Err(BufferError::Unknown(1)));
        assert_eq!(BufferError::Unknown(9).detail(), 9);
    }

    #[test]
    fn tenants_have_their_own_names_and_budgets() {
        let mut b = Buffers::new(1000);
        b.put(Some(1), 5, vec![1; 30], Some(50)).unwrap();
        let e = b.put(Some(1), 6, vec![1; 21], Some(50)).unwrap_err();
        assert_eq!(e.detail(), 50);
        assert!(matches!(e, BufferError::TenantFull { used: 30, .. }));
        // Tenant 2 and the anonymous class see nothing of tenant 1's.
        assert_eq!(b.get(Some(2), 5), Err(BufferError::Unknown(5)));
        assert_eq!(b.get(None, 5), Err(BufferError::Unknown(5)));
        b.put(Some(2), 5, vec![2; 50], Some(50)).unwrap();
        assert_eq!(b.get(Some(1), 5).unwrap(), &[1; 30][..]);
        assert_eq!(
            (b.used(), b.used_by(Some(1)), b.used_by(Some(2))),
            (80, 30, 50)
        );
        b.remove(Some(1), 5).unwrap();
        assert_eq!((b.used(), b.used_by(Some(1))), (50, 0));
    }

    #[test]
    fn create_claims_a_name_once_per_tenant() {
        let mut b = Buffers::new(100);
        b.create(Some(1), 7, vec![1; 10], None).unwrap();
        let e = b.create(Some(1), 7, vec![2; 20], None).unwrap_err();
        assert_eq!(e, BufferError::Exists(7));
        assert_eq!((e.detail(), e.status()), (7, Status::BufferExists));
        // Nothing changed: the first bytes stay, the budget counts them once.
        assert_eq!(b.get(Some(1), 7).unwrap(), &[1; 10][..]);
        assert_eq!(b.used(), 10);
        // Another tenant's name 7 is its own; a create past the budget is refused whole.
        b.create(Some(2), 7, vec![3; 90], None).unwrap();
        assert!(matches!(
            b.create(Some(3), 7, vec![4; 1], None),
            Err(BufferError::NodeFull { .. })
        ));
        assert_eq!(b.get(Some(3), 7), Err(BufferError::Unknown(7)));
        // Dropped, the name can be claimed again.
        b.remove(Some(1), 7).unwrap();
        b.create(Some(1), 7, vec![5; 10], None).unwrap();
    }
}
