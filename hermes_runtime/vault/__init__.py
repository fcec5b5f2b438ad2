"""vault capability."""
