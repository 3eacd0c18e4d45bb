"""Test helpers shared by the test tiers (local stand-ins for external services)."""
