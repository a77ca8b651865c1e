"""One message's way to its reply: access, people, agents, the window, the agent's turn, commands, the router."""
