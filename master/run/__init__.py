"""One run: plan, route, dispatch to the client nodes, judge."""
