"""The agent loop on the anthropic SDK; a client of sessiondb."""
