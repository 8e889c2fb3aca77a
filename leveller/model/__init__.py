"""The domain model: the words every layer shares, defined once.

A flow (``FlowKey``, IPv4 or IPv6), the messages between agents and the
controller as dataclasses (``messages``), the limits and names (levels, job
names, protocols, policies: ``limits``), the field checks that enforce them
(``checks``), a job's shape and its parser (``shape``), a job's spec (``job``)
and the error types (``errors``). Pure: no I/O, no clock, no globals beyond constants; imports
nothing from the rest of leveller (tests/unit/test_layers.py enforces both).
The wire format lives in leveller.rpc.schema, the BPF map layout in
leveller.agent.flow_structs: each converts to and from these types.
"""
