"""lcm capability."""
