"""An independent SimPy model of the Fig. 7 setup, written only to cross-check `offrac sim`.

It shares no code with the Rust simulator: it re-states Appendix B's model (closed-loop clients,
fragments 5-15 µs apart, retry after 80-120 µs), the reassembly buffers with their admission
policies (§3.2, §3.4), the single-fragment queue (§3.3), and one bounded queue per accelerator
instance fed round robin (§3.6). Times are in µs.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import simpy

FRAG_SIZES = {
    "single": ([1, 2, 4, 8], [95, 3, 1, 1]),
    "uniform": ([1, 2, 4, 8], [25, 25, 25, 25]),
    "multi": ([1, 2, 4, 8], [10, 30, 30, 30]),
}


@dataclass
class Req:
    client: int
    function: int
    frags: int
    done: simpy.Event


@dataclass
class Buffer:
    used: int = 0
    reassembling: bool = False
    ready: list[Req] = field(default_factory=list)


@dataclass
class Slot:
    function: int
    queue: list[Req] = field(default_factory=list)
    queued: int = 0
    busy: bool = False


class Node:
    def __init__(
        self, env: simpy.Environment, policy: str, exec_us: list[float], instances: list[int]
    ) -> None:
        self.env = env
        self.policy = policy
        self.exec_us = exec_us
        self.buffers = [Buffer() for _ in range(4)]
        self.buffer_cap = 16
        self.small: list[Req] = []
        self.small_cap = 16
        self.slots = [Slot(f) for f, n in enumerate(instances) for _ in range(n)]
        self.slot_cap = 64
        self.hosts = [[i for i, s in enumerate(self.slots) if s.function == f] for f in range(len(instances))]
        self.next_buffer = 0
        self.next_slot = [0] * len(instances)
        self.drain_from = 0

    def admit(self, r: Req) -> int | None:
        """Returns the buffer index, -1 for the small queue, or None when refused."""
        if r.frags == 1 and sum(q.frags for q in self.small) + 1 <= self.small_cap:
            self.small.append(r)
            self.drain()
            return -1
        n = len(self.buffers)

        def eligible(i: int) -> bool:
            b = self.buffers[i]
            return not b.reassembling and self.buffer_cap - b.used >= r.frags

        chosen: int | None = None
        if self.policy == "naive-rr":
            i = self.next_buffer
            self.next_buffer = (i + 1) % n
            chosen = i if eligible(i) else None
        elif self.policy == "eligible-rr":
            for k in range(n):
                i = (self.next_buffer + k) % n
                if eligible(i):
                    chosen = i
                    self.next_buffer = (i + 1) % n
                    break
        else:  # jsb
            cands = [i for i in range(n) if eligible(i)]
            chosen = min(cands, key=lambda i: (self.buffers[i].used, i)) if cands else None
        if chosen is not None:
            self.buffers[chosen].used += r.frags
            self.buffers[chosen].reassembling = True
        return chosen

    def complete(self, b: int, r: Req) -> None:
        buf = self.buffers[b]
        buf.reassembling = False
        buf.ready.append(r)
        self.drain()

    def pick_slot(self, r: Req) -> int | None:
        hosts = self.hosts[r.function]
        start = self.next_slot[r.function]
        for k in range(len(hosts)):
            s = hosts[(start + k) % len(hosts)]
            if self.slots[s].queued + r.frags <= self.slot_cap:
                self.next_slot[r.function] = (start + k + 1) % len(hosts)
                return s
        return None

    def drain(self) -> None:
        blocked: set[int] = set()
        for r in list(self.small):
            s = None if r.function in blocked else self.pick_slot(r)
            if s is None:
                blocked.add(r.function)
                continue
            self.small.remove(r)
            self.enqueue(s, r)
        n = len(self.buffers)
        for k in range(n):
            buf = self.buffers[(self.drain_from + k) % n]
            for r in list(buf.ready):
                s = None if r.function in blocked else self.pick_slot(r)
                if s is None:
                    blocked.add(r.function)
                    continue
                buf.ready.remove(r)
                buf.used -= r.frags
                self.enqueue(s, r)
        self.drain_from = (self.drain_from + 1) % n

    def enqueue(self, s: int, r: Req) -> None:
        slot = self.slots[s]
        slot.queue.append(r)
        slot.queued += r.frags
        self.start(s)

    def start(self, s: int) -> None:
        slot = self.slots[s]
        if slot.busy or not slot.queue:
            return
        r = slot.queue.pop(0)
        slot.queued -= r.frags
        slot.busy = True
        self.env.process(self.execute(s, r))

    def execute(self, s: int, r: Req):  # type: ignore[no-untyped-def]
        yield self.env.timeout(self.exec_us[r.function] * r.frags)
        self.slots[s].busy = False
        r.done.succeed()
        self.start(s)
        self.drain()


def client(  # type: ignore[no-untyped-def]
    env: simpy.Environment,
    node: Node,
    c: int,
    rng: random.Random,
    n: int,
    sizes: str,
    stats: dict,
    abort: bool,
):
    frags_of, weights = FRAG_SIZES[sizes]
    yield env.timeout(rng.uniform(5, 15))
    for _ in range(n):
        f = rng.randrange(3)
        k = rng.choices(frags_of, weights)[0]
        while True:
            stats["attempts"] += 1
            r = Req(c, f, k, env.event())
            sent_at = env.now
            b = node.admit(r)
            if b is None and abort:
                # The paper's client: stop sending the refused request, retry after the back-off.
                stats["drops"] += 1
                yield env.timeout(rng.uniform(80, 120))
                continue
            for _ in range(k - 1):
                yield env.timeout(rng.uniform(5, 15))
            if b is None:
                stats["drops"] += 1
                retry_at = sent_at + rng.uniform(80, 120)
                yield env.timeout(max(0.0, retry_at - env.now))
                continue
            if b >= 0:
                node.complete(b, r)
            yield r.done
            break


def run(
    policy: str,
    clients: int,
    seed: int,
    exec_us: list[float],
    requests: int = 100,
    sizes: str = "multi",
    abort: bool = True,
) -> dict[str, float]:
    env = simpy.Environment()
    node = Node(env, policy, exec_us, [4, 4, 4])
    rng = random.Random(seed)
    stats = {"attempts": 0, "drops": 0}
    for c in range(clients):
        env.process(client(env, node, c, rng, requests, sizes, stats, abort))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    return {"attempts": stats["attempts"], "drops": stats["drops"], "wall_s": wall}
