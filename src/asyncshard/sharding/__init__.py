"""Sharded formats as Stores wrapping any Store: inner chunks as keys."""
