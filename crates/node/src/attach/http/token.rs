//! HS256 JSON Web Token verification (RFC 7519 / RFC 7515), sans-IO: the
//! time is passed in. The MAC is `hmac` + `sha2`, compared in constant time
//! (`Mac::verify_slice`); only the compact form's framing and the claims are
//! read here.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

/// What a token must satisfy.
#[derive(Clone, PartialEq, Eq)]
pub struct Policy {
    /// The HS256 key.
    pub secret: Vec<u8>,
    /// If set, the `iss` claim must equal it.
    pub issuer: Option<String>,
    /// If set, the `aud` claim (a string or an array of strings) must contain it.
    pub audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_s: u64,
    /// Refuse tokens without `exp`.
    pub require_exp: bool,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway_s", &self.leeway_s)
            .field("require_exp", &self.require_exp)
            .finish()
    }
}

/// Why a token was refused. The text goes into the 401's
/// `WWW-Authenticate` `error_description`, so it holds no token bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    #[error("unsupported alg (only HS256 is accepted)")]
    Alg,
    #[error("unsupported critical header parameters")]
    Crit,
    #[error("bad signature")]
    Signature,
    #[error("token expired")]
    Expired,
    #[error("token not yet valid")]
    NotYetValid,
    #[error("token has no exp claim")]
    NoExp,
    #[error("wrong issuer")]
    Issuer,
    #[error("wrong audience")]
    Audience,
}

type HmacSha256 = Hmac<Sha256>;

fn json_object(part: &str, what: &'static str) -> Result<Map<String, Value>, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed(what))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(TokenError::Malformed(what)),
    }
}

/// A NumericDate claim (seconds since the epoch; may be fractional).
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<f64>, TokenError> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or(TokenError::Malformed("a date claim is not a number")),
    }
}

/// Verifies `token` (compact JWS) at `now_unix` seconds since the epoch.
pub fn verify(policy: &Policy, token: &str, now_unix: f64) -> Result<(), TokenError> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed("not three dot-separated parts"));
    };
    let header = json_object(h, "header is not base64url JSON")?;
    // The algorithm is fixed by the policy, never taken from the token
    // (no "none", no RS256 public key used as an HMAC key).
    if header.get("alg").and_then(Value::as_str) != Some("HS256") {
        return Err(TokenError::Alg);
    }
    if header.contains_key("crit") {
        return Err(TokenError::Crit);
    }
    let sig = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| TokenError::Malformed("signature is not base64url"))?;
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&policy.secret)
        .map_err(|_| TokenError::Signature)?;
    mac.update(&token.as_bytes()[..h.len() + 1 + p.len()]);
    mac.verify_slice(&sig).map_err(|_| TokenError::Signature)?;
    let claims = json_object(p, "payload is not base64url JSON")?;
    let leeway = policy.leeway_s as f64;
    match numeric_date(&claims, "exp")? {
        Some(exp) if now_unix >= exp + leeway => return Err(TokenError::Expired),
        None if policy.require_exp => return Err(TokenError::NoExp),
        _ => {}
    }
    if let Some(nbf) = numeric_date(&claims, "nbf")? {
        if now_unix + leeway < nbf {
            return Err(TokenError::NotYetValid);
        }
    }
    if let Some(want) = &policy.issuer {
        if claims.get("iss").and_then(Value::as_str) != Some(want.as_str()) {
            return Err(TokenError::Issuer);
        }
    }
    if let Some(want) = &policy.audience {
        let ok = match claims.get("aud") {
            Some(Value::String(a)) => a == want,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(want.as_str())),
            _ => false,
        };
        if !ok {
            return Err(TokenError::Audience);
        }
    }
    Ok(())
}

/// Signs `claims` with HS256 (for tests, examples and load tools).
pub fn sign(secret: &[u8], header: &Value, claims: &Value) -> String {
    let h = URL_SAFE_NO_PAD.encode(header.to_string());
    let p = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{h}.{p}");
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(signing_input.as_bytes());
    let tag: [u8; 32] = mac.finalize().into_bytes().into();
    let sig = URL_SAFE_NO_PAD.encode(tag);
    format!("{signing_input}.{sig}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &[u8] = b"a key of thirty-two bytes, ok!!!";
    const NOW: f64 = 1_700_000_000.0;

    fn policy() -> Policy {
        Policy {
            secret: KEY.to_vec(),
            issuer: Some("offrac".into()),
            audience: Some("api".into()),
            leeway_s: 5,
            require_exp: true,
        }
    }

    fn hs256(claims: Value) -> String {
        sign(KEY, &json!({"alg": "HS256", "typ": "JWT"}), &claims)
    }

    fn good() -> Value {
        json!({"sub": "u1", "iss": "offrac", "aud": ["x", "api"], "exp": NOW + 60.0, "nbf": NOW - 1.0})
    }

    #[test]
    fn a_valid_token_passes() {
        assert_eq!(verify(&policy(), &hs256(good()), NOW), Ok(()));
        // The jwt.io example token with key "secret" (its MAC computed
        // independently with Python's hmac module).
        let p = Policy {
            secret: b"secret".to_vec(),
            issuer: None,
            audience: None,
            leeway_s: 0,
            require_exp: false,
        };
        let t = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.XbPfbIHMI6arZ3Y922BhjWgQzWXcXNrz0ogtVhfEd2o";
        assert_eq!(verify(&p, t, NOW), Ok(()));
    }

    #[test]
    fn dates_are_checked_with_leeway() {
        let mut c = good();
        c["exp"] = json!(NOW - 4.0);
        assert_eq!(verify(&policy(), &hs256(c.clone()), NOW), Ok(()));
        c["exp"] = json!(NOW - 5.0);
        assert_eq!(verify(&policy(), &hs256(c), NOW), Err(TokenError::Expired));
        let mut c = good();
        c["nbf"] = json!(NOW + 6.0);
        assert_eq!(
            verify(&policy(), &hs256(c), NOW),
            Err(TokenError::NotYetValid)
        );
        let mut c = good();
        c.as_object_mut().unwrap().remove("exp");
        assert_eq!(verify(&policy(), &hs256(c), NOW), Err(TokenError::NoExp));
        let mut c = good();
        c["exp"] = json!("tomorrow");
        assert!(matches!(
            verify(&policy(), &hs256(c), NOW),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn issuer_and_audience_are_checked() {
        let mut c = good();
        c["iss"] = json!("someone");
        assert_eq!(verify(&policy(), &hs256(c), NOW), Err(TokenError::Issuer));
        let mut c = good();
        c["aud"] = json!("other");
        assert_eq!(verify(&policy(), &hs256(c), NOW), Err(TokenError::Audience));
        let mut c = good();
        c["aud"] = json!("api");
        assert_eq!(verify(&policy(), &hs256(c), NOW), Ok(()));
    }

    #[test]
    fn forged_and_foreign_tokens_are_refused() {
        let t = hs256(good());
        let other = sign(b"another key", &json!({"alg": "HS256"}), &good());
        assert_eq!(verify(&policy(), &other, NOW), Err(TokenError::Signature));
        // A payload swapped under a valid signature.
        let (hp, sig) = t.rsplit_once('.').unwrap();
        let (h, _) = hp.split_once('.').unwrap();
        let mut c = good();
        c["sub"] = json!("admin");
        let forged = format!("{h}.{}.{sig}", URL_SAFE_NO_PAD.encode(c.to_string()));
        assert_eq!(verify(&policy(), &forged, NOW), Err(TokenError::Signature));
        // alg none with an empty signature; RS256 (signed with the HS key, the
        // classic confusion attack): both refused before any MAC.
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(good().to_string())
        );
        assert_eq!(verify(&policy(), &none, NOW), Err(TokenError::Alg));
        let rs = sign(KEY, &json!({"alg": "RS256"}), &good());
        assert_eq!(verify(&policy(), &rs, NOW), Err(TokenError::Alg));
        let crit = sign(KEY, &json!({"alg": "HS256", "crit": ["b64"]}), &good());
        assert_eq!(verify(&policy(), &crit, NOW), Err(TokenError::Crit));
        // A truncated signature (still base64url: the MAC check refuses it).
        let mut raw = URL_SAFE_NO_PAD.decode(sig).unwrap();
        raw.truncate(16);
        let short = format!("{hp}.{}", URL_SAFE_NO_PAD.encode(raw));
        assert_eq!(verify(&policy(), &short, NOW), Err(TokenError::Signature));
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let bad_sig = format!("{}.e30.%%", URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256"}"#));
        for bad in [
            "",
            "a",
            "a.b",
            "a.b.c.d",
            "!!.e30.",
            "bnVsbA.e30.AA",
            &bad_sig,
        ] {
            assert!(
                matches!(verify(&policy(), bad, NOW), Err(TokenError::Malformed(_))),
                "{bad:?}"
            );
        }
        // A well-signed payload that is not an object.
        let t = sign(KEY, &json!({"alg": "HS256"}), &json!([1, 2]));
        assert!(matches!(
            verify(&policy(), &t, NOW),
            Err(TokenError::Malformed(_))
        ));
    }
}
