"""What conversation, memory and the model clients all read: message encoding, transcripts, cached prefixes."""
