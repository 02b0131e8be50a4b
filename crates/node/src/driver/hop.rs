//! Collective hops (`docs/protocol.md`, "Collective hops"): a hop for
//! function 251 in a chain of two or more hops runs a collective at the node
//! with the hop's input, and the chain goes on with this rank's output (or
//! answers it, at its last hop), so that e.g. `[scatter, BUFFER GET A, gemv,
//! reduce]` is one client call per rank. The hop's `param`: bits 0-31 name
//! the named buffer (of the request's tenant) holding the collective's
//! 64-byte call descriptor, put once; bits 32-63 are added to the
//! descriptor's tag, so every call of the same collective names a new tag
//! without a new descriptor. The engine hands the hop over
//! ([`offrac_core::Action::CollectiveHop`]) holding no slot and still owing
//! the request its answer; this file starts the collective and hands the
//! outcome back ([`offrac_core::Engine::handle_collective_hop_done`]).

use super::collective::status_of;
use super::Driver;
use offrac_collective::{Kind, DESCRIPTOR_LEN};
use offrac_core::{Instant, Job};
use offrac_proto::{decode_collective_hop_param, Status};

impl Driver {
    /// Start the collective of `job`'s current hop.
    pub(super) fn collective_hop(&mut self, now: Instant, job: Job) {
        let (name, advance) = decode_collective_hop_param(job.header.current_hop().param);
        let desc = match self.engine.buffers().get(job.tenant, name) {
            Ok(d) => d.to_vec(),
            Err(e) => {
                let msg = format!("the collective's descriptor: {e}");
                return self.hop_refused(now, job, e.status(), e.detail(), msg);
            }
        };
        if desc.len() != DESCRIPTOR_LEN || desc[0] != Kind::Call as u8 || desc[7] != 0 {
            let msg = format!(
                "buffer {name} is not a collective call's descriptor ({DESCRIPTOR_LEN} bytes, \
                 byte 0 = 1 (CALL), byte 7 = 0; it has {} bytes)",
                desc.len()
            );
            return self.hop_refused(now, job, Status::BadInput, 0, msg);
        }
        let mut desc = desc;
        let tag = u64::from_le_bytes(desc[8..16].try_into().unwrap_or([0; 8]));
        desc[8..16].copy_from_slice(&tag.wrapping_add(u64::from(advance)).to_le_bytes());
        let call = self.calls.next;
        self.calls.next += 1;
        let link_of = &self.link_of;
        // The hop's input is the job's payload, read in place (copied once,
        // into the work buffer).
        self.collectives.handle_call_with_input(
            now,
            call,
            &desc,
            Some(&job.payload.bytes()),
            |d| link_of[d as usize].is_some(),
        );
        self.calls.hops.insert(call, job);
        self.collective_outs(now);
    }

    /// A collective hop refused before its descriptor was read (there is
    /// none, or it is not a call's): the chain's answer is the refusal. The
    /// other members are not told (no collective is named); they fail at
    /// their deadline. A descriptor that names a collective but that the
    /// machine refuses (a wrong input length, …) aborts the others at once.
    fn hop_refused(&mut self, now: Instant, job: Job, status: Status, detail: u64, msg: String) {
        self.engine
            .handle_collective_hop_done(now, job, Err((status, detail, msg)));
        self.pump(now);
    }

    /// The collective of a chain's hop ended.
    pub(super) fn collective_hop_done(
        &mut self,
        now: Instant,
        job: Job,
        result: Result<Vec<u8>, offrac_collective::Failure>,
    ) {
        let result = result.map_err(|f| {
            let detail = f.device.map_or(0, u64::from);
            (status_of(f.kind), detail, f.message)
        });
        self.engine.handle_collective_hop_done(now, job, result);
        self.pump(now);
    }
}
