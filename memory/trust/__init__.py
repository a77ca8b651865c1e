"""Memory people can trust: a file's versions, undo, why, and receipts."""
