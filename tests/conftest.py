"""Shared fixtures. Each capability keeps its own fixtures in its test folder."""
