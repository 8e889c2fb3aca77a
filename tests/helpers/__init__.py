"""Shared test doubles, builders and the wait helper, imported by unit and integration tests alike.

- ``fakes``: doubles of the parts that need root, hardware or a peer (enforcer, gRPC handler, OpenFlow datapath).
- ``agents``: agents built over a job log and a fake or real controller client.
- ``rpc``: a report, a recording server on loopback, and raw dict surgery on wire messages.
- ``sdn``: packet frames and the SDN HTTP API app called directly.
- ``net``: free loopback ports.
- ``cli``: what a ``leveller`` command line parses to, its config file applied.
- ``levels``: random pruner inputs at scale.
- ``wait``: ``wait_until``, the one way a test waits for a condition (readiness, not sleeps).

A test module never imports from another test module: what two of them share lives here (or in a
conftest fixture).
"""
