"""The cluster's trust boundary: certificates, mutual TLS and peer identities."""
