"""The ground every layer stands on: errors, the clock, text, retries, prompts, redaction, config and shared types."""
