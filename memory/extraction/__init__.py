"""Memory extraction after an exchange: the request, the model's reply parsed, the edits applied."""
