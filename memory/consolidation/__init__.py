"""The nightly consolidation of daily notes into MEMORY.md, and its review."""
