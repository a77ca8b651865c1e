"""Per-agent markdown workspace files, the model's tools over them, and their export."""
