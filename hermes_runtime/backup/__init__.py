"""backup capability."""
