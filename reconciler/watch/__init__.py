"""reconciler/watch."""
