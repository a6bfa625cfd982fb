"""reconciler/nets."""
