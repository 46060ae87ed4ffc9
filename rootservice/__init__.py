"""RootService (RS): the control-plane process that owns cluster membership (SPEC.md)."""
