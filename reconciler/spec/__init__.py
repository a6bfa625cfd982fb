"""reconciler/spec."""
