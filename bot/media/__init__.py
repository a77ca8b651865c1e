"""Photos, PDFs and voice notes people send, turned into what the model reads."""
