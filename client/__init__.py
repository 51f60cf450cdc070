"""Client nodes: Bottle services that issue the real registry requests and time them."""
