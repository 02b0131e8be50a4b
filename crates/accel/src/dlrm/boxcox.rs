//! `boxcox` (id 16): the Box-Cox transform of each positive `float32`:
//! `(x^λ − 1) / λ`, or `ln x` for λ = 0, computed in `f64` as
//! `expm1(λ·ln x) / λ` (scipy `special.boxcox`) and rounded once to
//! `float32`. `param` bits 0-31: λ as `float32` bits (finite). Values ≤ 0,
//! NaN and infinities are refused with their index.

use offrac_proto::FunctionId;

use crate::elems::{element_count, map_f32, ELEM};
use crate::{AccelError, Accelerator};

#[derive(Debug, Default, Clone, Copy)]
pub struct BoxCox;

/// Box-Cox of one value in `f64` (the reference the kernel rounds).
pub fn boxcox(x: f64, lambda: f64) -> f64 {
    if lambda == 0.0 {
        x.ln()
    } else {
        (lambda * x.ln()).exp_m1() / lambda
    }
}

impl Accelerator for BoxCox {
    fn function(&self) -> FunctionId {
        FunctionId::BoxCox
    }

    fn inline_max_bytes(&self) -> usize {
        4096
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "float32")?;
        let lambda = f32::from_bits(param as u32);
        if param >> 32 != 0 || !lambda.is_finite() {
            return Err(AccelError::BadInput(format!(
                "lambda (param bits 0-31 as float32) = {lambda} must be finite, bits 32-63 zero"
            )));
        }
        let words = input.as_chunks::<ELEM>().0;
        if let Some(i) = words.iter().position(|w| {
            let x = f32::from_le_bytes(*w);
            !(x > 0.0 && x.is_finite())
        }) {
            return Err(AccelError::BadInput(format!(
                "value {} at index {i}: Box-Cox needs finite x > 0",
                f32::from_le_bytes(words[i])
            )));
        }
        let l = f64::from(lambda);
        map_f32(input, out, |x| boxcox(f64::from(x), l) as f32);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(xs: &[f32], lambda: f32) -> Result<Vec<f32>, AccelError> {
        let inp: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        BoxCox.run(u64::from(lambda.to_bits()), &inp, &mut out)?;
        Ok(out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    #[test]
    fn values() {
        let e = std::f32::consts::E; // a little below e
        assert_eq!(
            run(&[1.0, e], 0.0).unwrap(),
            [0.0, f64::from(e).ln() as f32]
        );
        assert_eq!(run(&[4.0], 0.5).unwrap(), [2.0]); // (2 - 1) / 0.5
        assert_eq!(run(&[3.0], 1.0).unwrap(), [2.0]);
        assert!(
            matches!(run(&[1.0, 0.0], 1.0), Err(AccelError::BadInput(m)) if m.contains("index 1"))
        );
        assert!(run(&[1.0], f32::NAN).is_err());
        assert!(run(&[-1.0], 1.0).is_err());
    }
}
