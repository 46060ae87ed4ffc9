"""Generated gRPC stubs (``make proto``) for ``obrpc.proto``; do not edit the *_pb2 files."""
