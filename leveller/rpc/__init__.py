"""Agent <-> controller RPC over gRPC, with JSON messages and an explicit schema.

Why JSON over gRPC generic handlers rather than protobuf: generated ``*_pb2``
code must not be committed, and generating it at run time needs grpcio-tools
and a writable cache at every start. The messages are small (a host's jobs
and flows every tau), and protobuf's schema would not catch what matters here
anyway: NaN/inf, negative counters, unknown jobs, oversize lists. So the
schema is explicit Python (leveller.rpc.schema) that names the bad field,
the codec refuses NaN/Infinity and duplicate keys, and gRPC still provides
HTTP/2 transport, deadlines, status codes and a maximum message size.

Authentication: every request carries an HMAC-SHA256 over (method, time,
body) with the cluster's shared secret in metadata; the controller checks it
with hmac.compare_digest before decoding, and signs its replies the same way,
so neither side acts on a message from a party without the secret.
"""
