// A thin C interface over the Verilated offrac_request_path (prefix Vrp) for
// the Rust crate: one call per clock cycle, the handshakes decided on the
// settled values before the rising edge.

#include <cstdint>
#include <cstring>
#include "Vrp.h"
#include "verilated.h"

extern "C" {

struct RpIn {
    uint8_t data[64];
    uint64_t keep;
    uint8_t conn;
    uint8_t valid;
    uint8_t out_ready;
    uint32_t seg;
    uint8_t cfg_valid;
    uint32_t cfg_data;
    uint8_t cfg_last;
    uint8_t bcfg_valid;
    uint32_t bcfg_data;
    uint8_t bcfg_last;
    uint8_t abort_valid;
    uint8_t abort_conn;
    uint8_t rst;
    uint32_t slot_mask;
    uint8_t slot_policy;
};

struct RpOut {
    uint8_t in_taken;
    uint8_t out_taken;
    uint8_t cfg_taken;
    uint8_t bcfg_taken;
    uint8_t abort_taken;
    uint8_t conn;
    uint8_t last;
    uint64_t keep;
    uint8_t data[64];
    uint32_t slot_start;
};

struct Rp {
    VerilatedContext* ctx;
    Vrp* top;
};

void* rp_new(void) {
    Rp* m = new Rp;
    m->ctx = new VerilatedContext;
    m->top = new Vrp{m->ctx};
    m->top->clk = 0;
    m->top->rst = 1;
    m->top->eval();
    return m;
}

void rp_free(void* p) {
    Rp* m = static_cast<Rp*>(p);
    m->top->final();
    delete m->top;
    delete m->ctx;
    delete m;
}

// Settle the inputs with the clock low, note the handshakes, then the rising edge.
void rp_cycle(void* p, const RpIn* in, RpOut* out) {
    Rp* m = static_cast<Rp*>(p);
    Vrp* t = m->top;
    t->rst = in->rst;
    for (int w = 0; w < 16; w++) {
        t->s_axis_tdata[w] = (uint32_t)in->data[4 * w] | ((uint32_t)in->data[4 * w + 1] << 8) |
                             ((uint32_t)in->data[4 * w + 2] << 16) | ((uint32_t)in->data[4 * w + 3] << 24);
    }
    t->s_axis_tkeep = in->keep;
    t->s_axis_tuser = in->conn;
    t->s_axis_tseg = in->seg;
    t->s_axis_tvalid = in->valid;
    t->m_axis_tready = in->out_ready;
    t->s_cfg_tdata = in->cfg_data;
    t->s_cfg_tkeep = in->cfg_valid ? 0xF : 0;
    t->s_cfg_tvalid = in->cfg_valid;
    t->s_cfg_tlast = in->cfg_last;
    t->s_bcfg_tdata = in->bcfg_data;
    t->s_bcfg_tvalid = in->bcfg_valid;
    t->s_bcfg_tlast = in->bcfg_last;
    t->s_abort_valid = in->abort_valid;
    t->s_abort_conn = in->abort_conn;
    t->cfg_slot_mask = in->slot_mask;
    t->cfg_slot_policy = in->slot_policy;
    t->clk = 0;
    t->eval();
    out->in_taken = in->valid && t->s_axis_tready && !in->rst;
    out->cfg_taken = in->cfg_valid && t->s_cfg_tready && !in->rst;
    out->bcfg_taken = in->bcfg_valid && t->s_bcfg_tready && !in->rst;
    out->abort_taken = in->abort_valid && t->s_abort_ready && !in->rst;
    out->out_taken = in->out_ready && t->m_axis_tvalid && !in->rst;
    out->slot_start = in->rst ? 0 : t->slot_start;
    if (out->out_taken) {
        for (int w = 0; w < 16; w++) {
            uint32_t v = t->m_axis_tdata[w];
            out->data[4 * w] = v & 0xFF;
            out->data[4 * w + 1] = (v >> 8) & 0xFF;
            out->data[4 * w + 2] = (v >> 16) & 0xFF;
            out->data[4 * w + 3] = (v >> 24) & 0xFF;
        }
        out->keep = t->m_axis_tkeep;
        out->conn = t->m_axis_tuser;
        out->last = t->m_axis_tlast;
    }
    t->clk = 1;
    t->eval();
}

uint64_t rp_cycles(void* p) { return static_cast<Rp*>(p)->top->cycles; }
uint8_t rp_idle(void* p) { return static_cast<Rp*>(p)->top->idle; }
uint64_t rp_conn_clean(void* p) { return static_cast<Rp*>(p)->top->conn_clean; }
uint64_t rp_conn_owed(void* p) { return static_cast<Rp*>(p)->top->conn_owed; }
uint32_t rp_dict_size(void* p) { return static_cast<Rp*>(p)->top->cfg_dict_size; }
uint8_t rp_cfg_overflow(void* p) { return static_cast<Rp*>(p)->top->cfg_overflow; }
uint8_t rp_bcfg_sets(void* p) { return static_cast<Rp*>(p)->top->bcfg_sets; }
uint8_t rp_bcfg_error(void* p) { return static_cast<Rp*>(p)->top->bcfg_error; }
}
