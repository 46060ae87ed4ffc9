"""What the root service, the observer agent and ``obadmin`` share: the clock seam, the
OceanBase error table, the gRPC protocol, and the one grammar each for durations, sizes and
server addresses. Nothing here imports from the three programs."""
