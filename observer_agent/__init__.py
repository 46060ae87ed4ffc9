"""The observer agent: the process on every data node that keeps a lease with the RS."""
