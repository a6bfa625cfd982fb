"""reconciler/applying."""
