"""Helpers shared by the tests, the benchmarks and the chaos run: free ports, real processes
(``cluster``), a private PostgreSQL (``pgserver``) and the fake-clock RS harness."""
