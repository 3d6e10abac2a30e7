"""Agent sessions: datasets, the replay rules, the level that runs them and its figures."""
