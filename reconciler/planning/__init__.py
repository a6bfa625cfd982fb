"""reconciler/planning."""
