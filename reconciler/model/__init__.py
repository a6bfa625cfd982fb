"""reconciler/model."""
