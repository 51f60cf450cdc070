"""Which client node sends a request: round-robin, or a consistent hash of the trace client.

Hash routing (``client_info.route: true``) keeps every request of one trace
client on one node, so one image push or pull stays together (it may skew the
load: a few busy trace clients can weigh more than the rest); the ring is consistent, so when a node dies only
its clients move.

Round-robin routing spreads trace clients, not requests, whenever the run keeps a per-client order
(``client_concurrency`` trace or N, the default): each trace client gets the next node in turn when
it is first seen and keeps it, so the node that runs its requests can keep their order and overlap
(client/client_gate.py) with no coordination between nodes; a client whose node dies gets the next
live node.  Only with ``client_concurrency: unlimited`` (no per-client order, the original trace
player's behaviour) is every request given the next node in turn.
"""

from __future__ import annotations

from uhashring import HashRing


class Router:
    def __init__(self, nodes: list[str], hashed: bool, per_client: bool = False) -> None:
        self.nodes = list(nodes)
        self.hashed = hashed
        self.ring = HashRing(nodes=self.nodes) if hashed else None
        self.next = 0
        # round-robin over trace clients: the node each client was given when first seen
        self.client_node: dict[str, str] | None = {} if per_client and not hashed else None
        self.live = set(self.nodes)

    @property
    def alive(self) -> bool:
        return bool(self.nodes)

    def pick(self, client: str) -> str | None:
        if not self.nodes:
            return None
        if self.ring is not None:
            return self.ring.get_node(client)
        assigned = self.client_node
        if assigned is not None:
            node = assigned.get(client)
            if node is not None and node in self.live:
                return node
        node = self.nodes[self.next % len(self.nodes)]
        self.next += 1
        if assigned is not None:
            assigned[client] = node
        return node

    def remove(self, node: str) -> None:
        if node in self.nodes:
            self.nodes.remove(node)
            self.live.discard(node)
            if self.ring is not None:
                self.ring.remove_node(node)
