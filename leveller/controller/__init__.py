"""The central controller: registry of agents and jobs, the per-tau decision, RPC handler, metrics."""
