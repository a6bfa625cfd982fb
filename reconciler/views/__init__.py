"""reconciler/views."""
