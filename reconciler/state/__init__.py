"""reconciler/state."""
