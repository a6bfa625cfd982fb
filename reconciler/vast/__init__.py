"""reconciler/vast."""
