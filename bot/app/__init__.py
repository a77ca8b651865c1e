"""Composition: the core and runtime built once, the daemon, the admin API and web page, the CLI's helpers."""
