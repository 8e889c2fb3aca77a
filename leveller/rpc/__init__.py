"""Agent <-> controller RPC over gRPC: service leveller.v1.Controller (leveller/rpc/leveller.proto).

Two encodings of the same methods on the same paths, told apart by the request's first
byte (leveller.rpc.protowire): JSON, which our agents and `leveller status` send
(leveller.rpc.schema, with the fast report path a controller of 1,000 agents needs), and
protobuf, for any other gRPC client (grpcurl, other languages), with server reflection and
grpc.health.v1 next to it. Both go through the same explicit checks that name the bad field:
protobuf's types would not catch what matters here anyway (NaN/inf, negative counters,
unknown jobs, oversize lists). gRPC provides HTTP/2 transport, deadlines, status codes and a
maximum message size.

Authentication: every request carries an HMAC-SHA256 over (method, time,
body) with the cluster's shared secret in metadata; the controller checks it
with hmac.compare_digest before decoding, and signs its replies the same way,
so neither side acts on a message from a party without the secret.
"""
