"""Shared test doubles, builders and the wait helper, imported by unit and integration tests alike.

- ``fakes``: doubles of the parts that need root, hardware or a peer (enforcer, gRPC handler, OpenFlow datapath).
- ``agents``: agents built over a job log and a fake or real controller client.
- ``rpc``: a report, a recording server on loopback, and raw dict surgery on wire messages.
- ``sdn``: packet frames and the SDN HTTP API app called directly.
- ``net``: free loopback ports.
- ``etcd``: an in-memory etcd on a fake clock (and one that loses requests and answers), a pair of
  controllers elected on it.
- ``cli``: what a ``leveller`` command line parses to, its config file applied.
- ``levels``: random pruner inputs at scale.
- ``levels_oracle``: the pairwise-graph level assignment LEVELLER shipped first, the oracle of the fast one.
- ``pictures``: what a PNG plot shows, measured from its pixels (colour areas, bar coverage).
- ``dashboard``: the Grafana dashboard in ``examples/grafana/``, its PromQL expressions and metric names.
- ``wait``: ``wait_until``, the one way a test waits for a condition (readiness, not sleeps).

A test module never imports from another test module: what two of them share lives here (or in a
conftest fixture).
"""
