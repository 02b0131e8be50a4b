//! `--tenant N --key HEX`: open data connections with an authenticated hello
//! (`docs/protocol.md`, "Tenants").

use crate::CliError;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct TenantArgs {
    /// Say hello as this tenant first (needs --key): the node charges the
    /// connection's requests to it and shows it its own modules.
    #[arg(long, requires = "key")]
    pub tenant: Option<u16>,
    /// The tenant's HMAC-SHA256 key, hex (as in the node's [[control.tenants]]).
    #[arg(long, requires = "tenant")]
    pub key: Option<String>,
}

impl TenantArgs {
    /// The tenant and its key bytes, if given.
    pub fn parsed(&self) -> Result<Option<(u16, Vec<u8>)>, CliError> {
        match (self.tenant, &self.key) {
            (Some(t), Some(k)) => {
                let key = hex::decode(k).map_err(|_| CliError::Usage("--key is not hex".into()))?;
                Ok(Some((t, key)))
            }
            _ => Ok(None),
        }
    }

    /// Say hello on `c` if a tenant was given.
    pub fn hello(&self, c: &mut offrac_client::Client) -> Result<(), CliError> {
        if let Some((tenant, key)) = self.parsed()? {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let env = offrac_control::wire::encode(
                tenant,
                now.as_millis() as u64,
                now.as_nanos() as u64,
                &offrac_control::Op::Hello,
                &key,
            );
            c.hello(tenant, &env)?;
        }
        Ok(())
    }
}
