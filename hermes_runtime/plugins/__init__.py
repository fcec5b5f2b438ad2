"""plugins capability."""
