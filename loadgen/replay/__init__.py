"""Real traffic replayed: a team's logged prompts, conversations and arrival traces (`--dataset FILE`)."""
