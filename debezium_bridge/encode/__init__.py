"""Encoders of canonical change records."""
