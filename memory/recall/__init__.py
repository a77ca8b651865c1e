"""Search over what an agent was told and wrote down: words, and vectors where configured."""
