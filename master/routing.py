"""Which client node sends a request: round-robin, or a consistent hash of the trace client.

Hash routing (``client_info.route: true``) keeps every request of one trace
client on one node, so one image push or pull stays together (it may skew the
load: a few busy trace clients can weigh more than the rest); the ring is consistent, so when a node dies only
its clients move.
"""

from __future__ import annotations

from uhashring import HashRing


class Router:
    def __init__(self, nodes: list[str], hashed: bool) -> None:
        self.nodes = list(nodes)
        self.hashed = hashed
        self.ring = HashRing(nodes=self.nodes) if hashed else None
        self.next = 0

    @property
    def alive(self) -> bool:
        return bool(self.nodes)

    def pick(self, client: str) -> str | None:
        if not self.nodes:
            return None
        if self.ring is not None:
            return self.ring.get_node(client)
        node = self.nodes[self.next % len(self.nodes)]
        self.next += 1
        return node

    def remove(self, node: str) -> None:
        if node in self.nodes:
            self.nodes.remove(node)
            if self.ring is not None:
                self.ring.remove_node(node)
