"""reconciler/head."""
