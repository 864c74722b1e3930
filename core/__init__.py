"""Shared value types and small utilities that agent/, tools/ and sim/ all import; imports none of them."""
